"""What a bench sends, from its flags: the levels (closed loop at a concurrency, or open loop at a request rate),
the dataset (random ids with fixed or ranged lengths, shared-prefix groups, a JSONL file of prompts) and the SLOs
that goodput counts against. Parsed once on the laptop, before any host is touched, so a bad value is one line
(exit 2) and the host script gets plain data.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sglops.core.errors import ConfigError

SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms", "itl": "itl_ms"}
SWEEP_KEYS = {"concurrency": "concurrency", "rate": "rate", "request_rate": "rate"}
MAX_JSONL_PROMPTS = 100_000
DEFAULT_OPEN_WINDOW_S = 10  # an open-loop level without --requests/--duration sends rate x 10 s requests


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
        if max(vals) > 4096:
            raise ConfigError(f"--sweep concurrency must be at most 4096 (got {max(vals)})")
        return kind, vals
    return kind, _numbers(values, "--sweep rate")


def levels(concurrency: list[int], request_rate: float | None, sweep: str | None) -> list[dict]:
    """The levels a bench measures, in order: [{"concurrency": C, "rate": R or None}]. Open-loop levels have
    concurrency 0 (no cap on requests in flight, as bench_serving's default)."""
    swept = parse_sweep(sweep)
    if swept and request_rate is not None:
        raise ConfigError("--sweep and --request-rate: give the rates as --sweep rate=1,2,4")
    if swept and list(concurrency) != [1]:
        raise ConfigError("--sweep and --concurrency: give the levels once, as --sweep concurrency=1,2,4")
    if request_rate is not None and list(concurrency) != [1]:
        raise ConfigError("--request-rate and --concurrency: a level is an open loop (a rate) or a closed loop "
                          "(streams); several rates: --sweep rate=1,2,4")
    if swept and swept[0] == "concurrency":
        return [{"concurrency": c, "rate": None} for c in swept[1]]
    if swept:
        return [{"concurrency": 0, "rate": r} for r in swept[1]]
    if request_rate is not None:
        if not request_rate > 0 or math.isinf(request_rate):
            raise ConfigError(f"--request-rate must be a positive number of requests per second (got {request_rate})")
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
            raise ConfigError(f"--slo must be like ttft=500,tpot=50 (milliseconds; keys {', '.join(SLO_KEYS)}), "
                              f"got {spec!r}")
        try:
            ms = float(value)
        except ValueError:
            raise ConfigError(f"--slo {key} must be a number of milliseconds (got {value!r})") from None
        if math.isnan(ms) or not 0 < ms < math.inf:
            raise ConfigError(f"--slo {key} must be a positive number of milliseconds (got {value!r})")
        out[SLO_KEYS[key]] = ms
    return out


def _span(value: str, what: str, low: int) -> list[int]:
    lo, sep, hi = value.partition("-")
    try:
        span = [int(lo), int(hi if sep else lo)]
    except ValueError:
        raise ConfigError(f"--dataset {what} must be a length or a range like 64-256 (got {value!r})") from None
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
      optionally `output_len` (else --output-len); read here, offline, and sent with the script.
    """
    if not spec or spec == "random":
        return {"kind": "random"}
    kind, _, rest = spec.partition(":")
    if kind == "jsonl":
        return _jsonl(rest, output_len)
    if kind not in ("random", "shared-prefix"):
        raise ConfigError(f"--dataset must be random, random:input=A-B,output=C-D, shared-prefix:groups=N,prefix=L "
                          f"or jsonl:PATH (got {spec!r})")
    out: dict[str, Any] = {"kind": "shared_prefix" if kind == "shared-prefix" else "random"}
    allowed = {"input", "output"} | ({"groups", "prefix"} if kind == "shared-prefix" else set())
    for item in [x.strip() for x in rest.split(",") if x.strip()]:
        key, sep, value = item.partition("=")
        if not sep or key not in allowed:
            raise ConfigError(f"--dataset {kind}: unknown or malformed {item!r} (keys: {', '.join(sorted(allowed))})")
        if key in ("input", "output"):
            out[key] = _span(value, key, 1 if key == "input" else 2)
        else:
            try:
                n = int(value)
            except ValueError:
                raise ConfigError(f"--dataset shared-prefix {key} must be a whole number (got {value!r})") from None
            if not 1 <= n <= (4096 if key == "groups" else 1 << 20):
                raise ConfigError(f"--dataset shared-prefix {key} out of range (got {n})")
            out["groups" if key == "groups" else "prefix_len"] = n
    if kind == "shared-prefix" and not {"groups", "prefix_len"} <= set(out):
        raise ConfigError("--dataset shared-prefix needs groups=N and prefix=L (e.g. shared-prefix:groups=4,prefix=512)")
    return out


def _jsonl(path_text: str, output_len: int) -> dict:
    path = Path(path_text).expanduser()
    if not path_text or not path.is_file():
        raise ConfigError(f"--dataset jsonl: no such file {path_text!r}")
    items = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset jsonl: cannot read {path}: {exc}") from None
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{where}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: each line must be a JSON object")
        item: dict[str, Any] = {}
        text = obj.get("prompt", obj.get("text"))
        ids = obj.get("input_ids")
        if isinstance(text, list) and ids is None:
            ids, text = text, None
        if ids is not None:
            if (not isinstance(ids, list) or not ids
                    or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ids)):
                raise ConfigError(f"{where}: input_ids must be a non-empty list of token ids")
            item["input_ids"] = ids
        elif isinstance(text, str) and text:
            item["text"] = text
        else:
            raise ConfigError(f"{where}: needs a prompt (a non-empty string) or input_ids")
        n = obj.get("output_len", obj.get("max_tokens"))
        if n is not None:
            if not isinstance(n, int) or isinstance(n, bool) or n < 2:
                raise ConfigError(f"{where}: output_len must be a whole number >= 2 (got {n!r})")
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
    lens = (f"input {'-'.join(map(str, dataset['input'])) if dataset.get('input') else input_len} / output "
            f"{'-'.join(map(str, dataset['output'])) if dataset.get('output') else output_len} tokens")
    if kind == "prompts":
        return f"{len(dataset['items'])} prompts from {dataset.get('source')} (output {output_len} unless given)"
    if kind == "shared_prefix":
        return (f"shared prefix: {dataset['groups']} groups x {dataset['prefix_len']}-token prefix + random ids, "
                + lens)
    return "random ordinary token ids below the model's vocabulary (input_ids), " + lens
