"""The launch path as the task prints it (from LaunchPath JSON, so a recorded probe.json prints the same)."""

from __future__ import annotations

from typing import Any

from sglops.probe.launch_rules import READ_MODE_WORDS


def short_where(where: str) -> str:
    return where.replace("srt/layers/attention/", "").replace("srt/arg_groups/", "arg_groups/")


def launch_lines(lp: dict[str, Any]) -> list[str]:
    """The answer as the task prints it (from LaunchPath.to_json(),
    so a recorded probe.json prints the same)."""
    head = (
        f"launch path: {lp['arch']}, --kv-cache-dtype {lp['kv_dtype']}, {lp['sm']} on sglang {lp['version']}"
    )
    out = [head]
    mla = {True: "MLA", False: "not MLA", None: "MLA unknown"}[lp["mla"]]
    out.append(f"  model: {mla} ({short_where(lp['mla_rule'])})")
    kind = "SPARSE (DSA/NSA)" if lp["sparse"] else "dense"
    out.append(f"  path: {kind} ({short_where(lp['sparse_rule'])})")
    for c in lp["choices"]:
        file = f"{c['backend_file']}_backend.py" if c["backend_file"] else "no backend file"
        out.append(f"  {c['stage']}: {c['value']} -> {file}, chosen at {short_where(c['rule'])}")
        for b in c["because"]:
            out.append(f"      because {short_where(b)}")
        if lp["kv_dtype"].startswith("fp8") or c["read_mode"]:
            ev = ", ".join(short_where(e) for e in c["evidence"])
            mode = READ_MODE_WORDS.get(c["read_mode"] or "unknown", c["read_mode"])
            out.append(
                f"      FP8 KV: {mode}"
                + (f" [{ev}]" if ev else "")
                + (f"; {c['note']}" if c["note"] and c["note"] != mode else "")
            )
    if lp.get("indexer"):
        out.append(
            "  DSA indexer: "
            + ", ".join(
                f"--{i['field'].replace('_', '-')} {i['value']} ({i['how']}, {short_where(i['where'])})"
                for i in lp["indexer"]
            )
        )
    for lim in lp.get("limits", []):
        out.append(f"  shared memory (stated in the tree): {short_where(lim)}")
    for r in lp.get("renamed", []):
        out.append(f"  RENAMED: {short_where(r)}")
    for r in lp["refused"]:
        out.append(f"  REFUSED: {short_where(r)}")
    for u in lp["undetermined"]:
        out.append(f"  undetermined: {short_where(u)}")
    for ch in lp["changes"]:
        out.append(f"  you can change: {ch}")
    for a in lp["assumed"]:
        out.append(f"  assumed: {a}")
    return out
