"""Bigger traces made from real ones, for the trace tests: `copies` copies of a real trace's events, each
copy's times shifted past the previous one and its correlation / External ids offset, so that every copy's
launches stay matched to their own kernels. Metadata events ("ph": "M", thread and process names) appear once,
as in a real trace."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

IDS = ("correlation", "External id")


def replicate(
    source: Path,
    out: Path,
    copies: int,
    *,
    indent: int | None = 1,
    nested: bool = False,
    shuffle: bool = False,
    id_offset: int = 0,
) -> Path:
    """indent None: one event per line; 1: indented as torch writes them (`},` then a newline between events).
    nested: each event's args also carry a list of objects, so '},' newline '{' occurs inside events too.
    shuffle: the events in a random (seeded) order. id_offset: added to every id (wide ids)."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    top = 1 + max(int((e.get("args") or {}).get(k, 0) or 0) for e in events for k in IDS)
    rows = []
    for c in range(copies):
        for e in events:
            if e.get("ph") == "M" and c:
                continue
            e2 = dict(e)
            if isinstance(e2.get("ts"), int | float):
                e2["ts"] = e2["ts"] + c * span
            if e2.get("args") or nested:
                args = e2["args"] = dict(e2.get("args") or {})
                for k in IDS:
                    if isinstance(args.get(k), int) and args[k] > 0:
                        args[k] += c * top + id_offset
                if nested:
                    args["shapes"] = [{"dim": i} for i in range(4)]
            rows.append(e2)
    if shuffle:
        random.Random(7).shuffle(rows)
    with open(out, "w") as fh:
        fh.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        fh.write(",\n".join(json.dumps(r, indent=indent) for r in rows))
        fh.write('\n], "traceName": "replica"}\n')
    return out
