"""What a bench sends, from its flags: the levels (closed loop at a concurrency, or open loop at a request
rate), the dataset (random ids with fixed or ranged lengths, shared-prefix groups, a JSONL file of prompts)
and the SLOs that goodput counts against. Parsed once on the laptop, before any host is touched, so a bad
value is one line (exit 2) and the host script gets plain data.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sglops.bench import session_texts
from sglops.core.errors import ConfigError
from sglops.core.values import MAX_TOKENS

SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms", "itl": "itl_ms"}
SWEEP_KEYS = {"concurrency": "concurrency", "rate": "rate", "request_rate": "rate"}
MAX_JSONL_PROMPTS = 100_000
# requests per second: --request-rate and --sweep rate= alike
RATE_RANGE = (0.001, 1e6)
# --concurrency and --sweep concurrency= alike
MAX_CONCURRENCY = 4096
# seconds between /metrics scrapes (0: none); each scrape costs the server a render
MIN_METRICS_INTERVAL = 0.1
# a token id: past any vocabulary (the host checks the model's own)
MAX_ID = (1 << 31) - 1
# nesting of a jsonl line (a prompt object is two deep)
MAX_DEPTH = 32


def _numbers(text: str, what: str, cast: type = float) -> list:
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            value = cast(item)
        except ValueError:
            raise ConfigError(f"{what} must be numbers like 1,2,4 (got {text!r})") from None
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            raise ConfigError(f"{what} must be finite numbers (got {text!r})")
        if value <= 0:
            raise ConfigError(f"{what} must be positive (got {text!r})")
        out.append(value)
    if not out:
        raise ConfigError(f"{what} names no value (got {text!r})")
    return list(dict.fromkeys(out))


def parse_sweep(spec: str | None) -> tuple[str, list] | None:
    """`concurrency=1,2,4,8` or `rate=1,2,4` -> ("concurrency" | "rate", values)."""
    if not spec:
        return None
    key, sep, values = spec.partition("=")
    kind = SWEEP_KEYS.get(key.strip())
    if not sep or kind is None:
        raise ConfigError(f"--sweep must be concurrency=1,2,4 or rate=1,2,4 (got {spec!r})")
    if kind == "concurrency":
        vals = _numbers(values, "--sweep concurrency", int)
        if max(vals) > MAX_CONCURRENCY:
            raise ConfigError(f"--sweep concurrency must be at most {MAX_CONCURRENCY} (got {max(vals)})")
        return kind, vals
    vals = _numbers(values, "--sweep rate")
    lo, hi = RATE_RANGE
    bad = next((v for v in vals if not lo <= v <= hi), None)
    if bad is not None:
        raise ConfigError(
            f"--sweep rate must be numbers from {lo:g} to {hi:g} requests per second, as --request-rate "
            f"(got {bad:g})"
        )
    return kind, vals


def check_metrics_interval(seconds: float | None) -> None:
    """0 (never) or at least MIN_METRICS_INTERVAL: a scrape every nanosecond is a load of its own."""
    if seconds and not MIN_METRICS_INTERVAL <= float(seconds) <= 3600:
        raise ConfigError(
            f"--metrics-interval must be 0 (never) or from {MIN_METRICS_INTERVAL:g} to 3600 seconds "
            f"(got {seconds:g})"
        )


def levels(concurrency: list[int], request_rate: float | None, sweep: str | None) -> list[dict]:
    """The levels a bench measures, in order: [{"concurrency": C, "rate": R or None}]. Open-loop levels have
    concurrency 0 (no cap on requests in flight, as bench_serving's default)."""
    swept = parse_sweep(sweep)
    if swept and request_rate is not None:
        raise ConfigError("--sweep and --request-rate: give the rates as --sweep rate=1,2,4")
    if swept and list(concurrency) != [1]:
        raise ConfigError("--sweep and --concurrency: give the levels once, as --sweep concurrency=1,2,4")
    if request_rate is not None and list(concurrency) != [1]:
        raise ConfigError(
            "--request-rate and --concurrency: a level is an open loop (a rate) or a closed loop "
            "(streams); several rates: --sweep rate=1,2,4"
        )
    if swept and swept[0] == "concurrency":
        return [{"concurrency": c, "rate": None} for c in swept[1]]
    if swept:
        return [{"concurrency": 0, "rate": r} for r in swept[1]]
    if request_rate is not None:
        if not request_rate > 0 or math.isinf(request_rate):
            raise ConfigError(
                f"--request-rate must be a positive number of requests per second (got {request_rate})"
            )
        return [{"concurrency": 0, "rate": float(request_rate)}]
    return [{"concurrency": int(c), "rate": None} for c in concurrency]


def parse_slo(spec: str | None) -> dict[str, float] | None:
    """`ttft=500,tpot=50` (milliseconds) -> {"ttft_ms": 500.0, "tpot_ms": 50.0}."""
    if not spec:
        return None
    out: dict[str, float] = {}
    for item in spec.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key not in SLO_KEYS:
            raise ConfigError(
                f"--slo must be like ttft=500,tpot=50 (milliseconds; keys {', '.join(SLO_KEYS)}), "
                f"got {spec!r}"
            )
        try:
            ms = float(value)
        except ValueError:
            raise ConfigError(f"--slo {key} must be a number of milliseconds (got {value!r})") from None
        if math.isnan(ms) or not 0 < ms < math.inf:
            raise ConfigError(f"--slo {key} must be a positive number of milliseconds (got {value!r})")
        if SLO_KEYS[key] in out:
            raise ConfigError(f"--slo names {key} twice (got {spec!r})")
        out[SLO_KEYS[key]] = ms
    return out


def _span(value: str, what: str, low: int) -> list[int]:
    lo, sep, hi = value.partition("-")
    try:
        span = [int(lo), int(hi if sep else lo)]
    except ValueError:
        raise ConfigError(
            f"--dataset {what} must be a length or a range like 64-256 (got {value!r})"
        ) from None
    if span[0] < low or span[1] < span[0] or span[1] > 1 << 20:
        raise ConfigError(f"--dataset {what} must be a range from {low} up, low <= high (got {value!r})")
    return span


def parse_dataset(spec: str | None, output_len: int = 2) -> dict:
    """The dataset a bench sends (`docs/bench.md`):

    - `random` (default): random ordinary ids, --input-len / --output-len;
    - `random:input=64-256,output=16-128`: lengths uniform in those ranges (seeded: the same per run);
    - `shared-prefix:groups=4,prefix=512[,input=..,output=..]`: G prefixes of that many ids, request i gets
      prefix i % G then its own --input-len random ids (the server's prefix cache decides TTFT);
    - `jsonl:PATH`: one JSON object per line with `prompt` or `text` (a string) or `input_ids` (ids), and
      optionally `output_len` (else --output-len); read here, offline, and sent with the script;
    - `trace:PATH[,layout=..,unit=..,block=..]`: a timestamped request trace (sglops.bench.workload_trace),
      each request sent at its time.
    """
    if not spec or spec == "random":
        return {"kind": "random"}
    kind, _, rest = spec.partition(":")
    if kind == "jsonl":
        return _jsonl(rest, output_len)
    if kind == "trace":
        from sglops.bench import workload_trace

        return workload_trace.parse(rest)
    if kind == "sessions":
        return _sessions(spec, rest)
    if kind not in ("random", "shared-prefix"):
        raise ConfigError(
            f"--dataset must be random, random:input=A-B,output=C-D, shared-prefix:groups=N,prefix=L, "
            f"jsonl:PATH, trace:PATH or sessions:count=N,turns=T,new=M (got {spec!r})"
        )
    out: dict[str, Any] = {"kind": "shared_prefix" if kind == "shared-prefix" else "random"}
    allowed = {"input", "output"} | ({"groups", "prefix"} if kind == "shared-prefix" else set())
    for item in [x.strip() for x in rest.split(",") if x.strip()]:
        key, sep, value = item.partition("=")
        if not sep or key not in allowed:
            raise ConfigError(
                f"--dataset {kind}: unknown or malformed {item!r} (keys: {', '.join(sorted(allowed))})"
            )
        if key in ("input", "output"):
            out[key] = _span(value, key, 1 if key == "input" else 2)
        else:
            try:
                n = int(value)
            except ValueError:
                raise ConfigError(
                    f"--dataset shared-prefix {key} must be a whole number (got {value!r})"
                ) from None
            if not 1 <= n <= (4096 if key == "groups" else 1 << 20):
                raise ConfigError(f"--dataset shared-prefix {key} out of range (got {n})")
            out["groups" if key == "groups" else "prefix_len"] = n
    if kind == "shared-prefix" and not {"groups", "prefix_len"} <= set(out):
        raise ConfigError(
            "--dataset shared-prefix needs groups=N and prefix=L (e.g. shared-prefix:groups=4,prefix=512)"
        )
    return out


SESSION_KEYS = {
    "count": (1, 4096),
    "turns": (1, 64),
    "system": (0, 1 << 16),
    "new": (1, 1 << 16),
    "think": (0, 600_000),
}


def _sessions(spec: str, rest: str) -> dict:
    """`sessions:count=8,turns=4,new=32[,system=256][,output=16-64][,think=500]`: count conversations of
    `turns` turns; each turn sends the whole history (system prompt, earlier turns and the server's own
    answers) plus `new` fresh ids; `think` ms between a session's turns. `texts=PATH` (the chat API only):
    the sessions' own texts instead of drawn ids (session_texts.read)."""
    out: dict[str, Any] = {"kind": "sessions", "system": 0, "think_ms": 0}
    texts = None
    for item in [x.strip() for x in rest.split(",") if x.strip()]:
        key, sep, value = item.partition("=")
        if not sep or key not in {*SESSION_KEYS, "output", "texts"}:
            raise ConfigError(
                f"--dataset sessions: unknown or malformed {item!r} (keys: count, turns, new, system, "
                f"output, think, texts)"
            )
        if key == "output":
            out["output"] = _span(value, "output", 2)
            continue
        if key == "texts":
            texts = session_texts.read(value)
            continue
        lo, hi = SESSION_KEYS[key]
        if not value.isdigit() or not lo <= int(value) <= hi:
            raise ConfigError(
                f"--dataset sessions {key} must be a whole number from {lo} to {hi} (got {value!r})"
            )
        out["think_ms" if key == "think" else key] = int(value)
    if texts is not None:
        return session_texts.fitted(out, texts)
    if not {"count", "turns", "new"} <= set(out):
        raise ConfigError(
            f"--dataset sessions needs count=N, turns=T and new=M (e.g. sessions:count=8,turns=4,new=32; "
            f"got {spec!r})"
        )
    return out


def _jsonl_path(path_text: str) -> Path:
    try:
        path = Path(path_text).expanduser()
    # ~nosuchuser/...: no such home folder
    except RuntimeError:
        raise ConfigError(f"--dataset jsonl: no such file {path_text!r} (no such user's home)") from None
    if not path_text or not path.is_file():
        raise ConfigError(f"--dataset jsonl: no such file {path_text!r}")
    return path


def _too_deep(line: str) -> bool:
    """Whether a line nests deeper than MAX_DEPTH (counted
    before parsing: json recursion ends in a traceback)."""
    depth, in_str, escaped = 0, False, False
    for c in line:
        if in_str:
            in_str, escaped = (c != '"' or escaped), (c == "\\" and not escaped)
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif c in "]}":
            depth -= 1
    return False


def _jsonl(path_text: str, output_len: int) -> dict:
    path = _jsonl_path(path_text)
    items = []
    try:
        # a UTF-8 BOM (Windows editors) is no prompt
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset jsonl: cannot read {path}: {exc}") from None
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        if line.count("[") + line.count("{") > MAX_DEPTH and _too_deep(line):
            raise ConfigError(
                f"{where}: nested deeper than {MAX_DEPTH} levels (a prompt is an object of strings, "
                "ids and numbers)"
            )
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{where}: not JSON ({str(exc)[:200]})") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: each line must be a JSON object")
        item: dict[str, Any] = {}
        text = obj.get("prompt", obj.get("text"))
        ids = obj.get("input_ids")
        if isinstance(text, list) and ids is None:
            ids, text = text, None
        if ids is not None:
            if (
                not isinstance(ids, list)
                or not ids
                or len(ids) > MAX_TOKENS
                or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_ID for x in ids)
            ):
                raise ConfigError(
                    f"{where}: input_ids must be a non-empty list of at most {MAX_TOKENS} token ids, "
                    f"each from 0 to {MAX_ID}"
                )
            item["input_ids"] = ids
            item["line"] = no
        elif isinstance(text, str) and text:
            item["text"] = text
        else:
            raise ConfigError(f"{where}: needs a prompt (a non-empty string) or input_ids")
        n = obj.get("output_len", obj.get("max_tokens"))
        if n is not None:
            if not isinstance(n, int) or isinstance(n, bool) or not 2 <= n <= MAX_TOKENS:
                raise ConfigError(
                    f"{where}: output_len must be a whole number from 2 to {MAX_TOKENS} (got {str(n)[:40]})"
                )
            item["output_len"] = n
        items.append(item)
        if len(items) > MAX_JSONL_PROMPTS:
            raise ConfigError(f"--dataset jsonl: more than {MAX_JSONL_PROMPTS} prompts in {path}")
    if not items:
        raise ConfigError(f"--dataset jsonl: {path} holds no prompts")
    return {"kind": "prompts", "items": items, "source": str(path)}


def describe(dataset: dict, input_len: int, output_len: int) -> str:
    """One phrase for the record and the caption."""
    kind = dataset.get("kind", "random")
    lens = (
        f"input {'-'.join(map(str, dataset['input'])) if dataset.get('input') else input_len} / output "
        f"{'-'.join(map(str, dataset['output'])) if dataset.get('output') else output_len} tokens"
    )
    if kind == "trace":
        from sglops.bench import workload_trace

        return workload_trace.describe(dataset)
    if kind == "prompts":
        return (
            f"{len(dataset['items'])} prompts from {dataset.get('source')} (output {output_len} unless given)"
        )
    if kind == "sessions" and dataset.get("texts"):
        return (
            f"{dataset['count']} sessions x {dataset['turns']} turns of {dataset.get('source')}'s texts: "
            f"history + the server's answers + the turn's text, output "
            f"{'-'.join(map(str, dataset['output'])) if dataset.get('output') else output_len} tokens"
        )
    if kind == "sessions":
        return (
            f"{dataset['count']} sessions x {dataset['turns']} turns: history + the server's answers + "
            f"{dataset['new']} new ids per turn (system prompt {dataset['system']} ids), output "
            f"{'-'.join(map(str, dataset['output'])) if dataset.get('output') else output_len} tokens"
        )
    if kind == "shared_prefix":
        return (
            f"shared prefix: {dataset['groups']} groups x {dataset['prefix_len']}-token prefix + random ids, "
            + lens
        )
    return "random ordinary token ids below the model's vocabulary (input_ids), " + lens


def check_api(api: str, dataset: dict) -> None:
    """The chat API sends text messages: sessions (their text: the server's decoding of the drawn ids, or a
    texts file) or a file's text prompts; a texts file is text, so only the chat API sends it."""
    kind = dataset.get("kind", "random")
    if kind == "sessions" and dataset.get("texts") and api != "openai-chat":
        raise ConfigError("--dataset sessions:texts=PATH holds chat texts: it needs --api openai-chat")
    if api != "openai-chat" or kind == "sessions":
        return
    if kind == "prompts" and all(item.get("text") is not None for item in dataset.get("items") or []):
        return
    raise ConfigError(
        "--api openai-chat sends chat messages (text): use it with --dataset sessions:... or a jsonl file of "
        "text prompts, not token ids"
    )
