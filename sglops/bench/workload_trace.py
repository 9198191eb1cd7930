"""`--dataset trace:PATH`: a timestamped request trace from production, read here (offline) into plain data
for the host script, which sends each request at its time.

Two layouts (docs/bench.md, samples in tests/data/workloads/):
- `mooncake` (the FAST'25 traces SGLang's bench replays): one JSON object per line, `timestamp` in
  milliseconds from the first request, `input_length`, `output_length`, `hash_ids` (each id one block of 512
  prompt tokens; two requests naming the same ids share that prefix);
- `timed_trace` (vLLM's `bench serve --dataset-name timed_trace`, which also replays Alibaba's Bailian
  traces): the same keys, timestamps in seconds unless `unit=ms`, blocks of 16 tokens unless `block=N`, and
  `prompt_ids` (the prompt's own token ids) where a trace carries them, or `prompt` (its text, sent as text:
  the server tokenizes it, as a client replaying text would have it do inside TTFT).

Otherwise no token text travels: the host draws each block's ids from the model's vocabulary as the
other datasets do, the same ids for the same hash id within a repeat (the trace's prefix sharing is kept)
and for the same seed across runs (output identity across runs is kept).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sglops.core.errors import ConfigError
from sglops.core.values import MAX_TOKENS

LAYOUTS = {"mooncake": {"unit": "ms", "block": 512}, "timed_trace": {"unit": "s", "block": 16}}
UNITS = {"ms": 1e-3, "s": 1.0}
MAX_REQUESTS = 100_000
MAX_ID = (1 << 31) - 1
# a trace longer than a week is a unit mistake, not a replay
MAX_SPAN_S = 7 * 86400
# a prompt's text: a few bytes a token at most
MAX_PROMPT_CHARS = 16 * MAX_TOKENS


def parse(spec: str) -> dict:
    """`PATH[,layout=mooncake|timed_trace][,unit=ms|s][,block=N]` -> the dataset the host script replays."""
    path_text, opts = _split(spec)
    path = Path(path_text).expanduser()
    if not path_text or not path.is_file():
        raise ConfigError(f"--dataset trace: no such file {path_text!r}")
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset trace: cannot read {path}: {exc}") from None
    rows = [(no, _line(f"{path}:{no}", line)) for no, line in enumerate(lines, 1) if line.strip()]
    if not rows:
        raise ConfigError(f"--dataset trace: {path} holds no requests")
    if len(rows) > MAX_REQUESTS:
        raise ConfigError(f"--dataset trace: more than {MAX_REQUESTS} requests in {path}")
    layout = opts.get("layout") or (
        "timed_trace"
        if any(r["prompt_ids"] is not None or r["prompt"] is not None for _, r in rows)
        else "mooncake"
    )
    unit = opts.get("unit") or LAYOUTS[layout]["unit"]
    block = int(opts.get("block") or LAYOUTS[layout]["block"])
    items = [_item(f"{path}:{no}", no, r, UNITS[unit], block) for no, r in rows]
    order = sorted(range(len(items)), key=lambda k: items[k]["t"])
    t0 = items[order[0]]["t"]
    items = [{**items[k], "t": round(items[k]["t"] - t0, 6)} for k in order]
    if items[-1]["t"] > MAX_SPAN_S:
        raise ConfigError(
            f"--dataset trace: {path} spans {items[-1]['t']:.0f} s in unit={unit}: more than a week "
            "(timestamps in another unit? set unit=ms or unit=s)"
        )
    raised = sum(1 for r in rows if r[1]["output_length"] < 2)
    return {
        "kind": "trace",
        "items": items,
        "source": str(path),
        "layout": layout,
        "unit": unit,
        "block": block,
        "requests": len(items),
        "span_s": items[-1]["t"],
        "sorted": order == sorted(order),
        "outputs_raised_to_2": raised,
    }


def _split(spec: str) -> tuple[str, dict[str, str]]:
    """The path and the trailing key=value options (a path may itself hold commas; options come last)."""
    parts = spec.split(",")
    opts: dict[str, str] = {}
    while (
        len(parts) > 1
        and "=" in parts[-1]
        and parts[-1].split("=", 1)[0].strip() in ("layout", "unit", "block")
    ):
        key, value = (x.strip() for x in parts.pop().split("=", 1))
        opts[key] = value
    if opts.get("layout", "mooncake") not in LAYOUTS:
        raise ConfigError(f"--dataset trace: layout must be {' or '.join(LAYOUTS)} (got {opts['layout']!r})")
    if opts.get("unit", "ms") not in UNITS:
        raise ConfigError(f"--dataset trace: unit must be ms or s (got {opts['unit']!r})")
    if "block" in opts and not (opts["block"].isdigit() and 1 <= int(opts["block"]) <= 1 << 16):
        raise ConfigError(
            f"--dataset trace: block must be tokens per hash id, 1 to 65536 (got {opts['block']!r})"
        )
    return ",".join(parts), opts


def _whole(obj: dict, key: str, where: str, low: int) -> int:
    n = obj.get(key)
    if not isinstance(n, int) or isinstance(n, bool) or not low <= n <= MAX_TOKENS:
        raise ConfigError(
            f"{where}: {key} must be a whole number from {low} to {MAX_TOKENS} (got {str(n)[:40]})"
        )
    return n


def _ids(obj: dict, key: str, where: str) -> list[int] | None:
    ids = obj.get(key)
    if ids is None:
        return None
    if (
        not isinstance(ids, list)
        or len(ids) > MAX_TOKENS
        or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_ID for x in ids)
    ):
        raise ConfigError(
            f"{where}: {key} must be a list of at most {MAX_TOKENS} whole numbers from 0 to {MAX_ID}"
        )
    return ids


def _text(obj: dict, key: str, where: str) -> str | None:
    text = obj.get(key)
    if text is None:
        return None
    if not isinstance(text, str) or not text or len(text) > MAX_PROMPT_CHARS:
        raise ConfigError(
            f"{where}: {key} must be a non-empty string of at most {MAX_PROMPT_CHARS} characters"
        )
    return text


def _line(where: str, line: str) -> dict:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{where}: not JSON ({str(exc)[:200]})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: each line must be a JSON object")
    t = obj.get("timestamp")
    if isinstance(t, bool) or not isinstance(t, int | float) or math.isnan(t) or math.isinf(t) or t < 0:
        raise ConfigError(f"{where}: timestamp must be a number >= 0 (got {str(t)[:40]})")
    return {
        "timestamp": t,
        "input_length": _whole(obj, "input_length", where, 1),
        "output_length": _whole(obj, "output_length", where, 1),
        "hash_ids": _ids(obj, "hash_ids", where),
        "prompt_ids": _ids(obj, "prompt_ids", where),
        "prompt": _text(obj, "prompt", where),
    }


def _item(where: str, no: int, r: dict, unit_s: float, block: int) -> dict[str, Any]:
    """One request: its time (s), lengths, and either its own ids or the hash ids of its prompt's blocks."""
    item: dict[str, Any] = {
        "t": r["timestamp"] * unit_s,
        "in": r["input_length"],
        "out": max(2, r["output_length"]),
        "line": no,
    }
    if r["prompt"] is not None:
        if r["prompt_ids"] is not None:
            raise ConfigError(f"{where}: prompt and prompt_ids both given: give the text or the ids")
        item["ids"] = r["prompt"]
    elif r["prompt_ids"] is not None:
        if len(r["prompt_ids"]) != r["input_length"]:
            raise ConfigError(
                f"{where}: prompt_ids holds {len(r['prompt_ids'])} ids, input_length says {r['input_length']}"
            )
        item["ids"] = r["prompt_ids"]
    elif r["hash_ids"]:
        if (len(r["hash_ids"]) - 1) * block >= r["input_length"]:
            raise ConfigError(
                f"{where}: {len(r['hash_ids'])} hash ids of {block} tokens are more than input_length "
                f"{r['input_length']} (block=N sets the tokens per hash id)"
            )
        item["blocks"] = r["hash_ids"]
    return item


def describe(d: dict) -> str:
    return (
        f"trace {d['source']} ({d['layout']}: {d['requests']} requests over {d['span_s']:.1f} s, "
        f"{d['block']}-token blocks, lengths from the trace)"
    )
