"""The GPU tier's tables (docs/gpu.md) from its kept records: `python3 benchmarks/gpu_tier_table.py DIR`.

DIR is what `scripts/gpu-tier.sh collect` brought back, unpacked (the 2026-12-03 run's: `git show
a75f672:benchmarks/results/gpu-e2e/records.tar.gz`): `artifacts/` (sglops run records), `logs/`,
`backends.json`. Every figure printed is read from those records; nothing is computed that the records do not
hold, except ratios of two recorded medians.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def play_doc(art: Path) -> dict:
    for path in sorted(art.glob("local/*/play.json"), reverse=True):
        doc = load(path)
        if doc.get("play") == "gpu-fp8-kv" and not doc.get("dry_run"):
            return doc
    raise SystemExit(f"no gpu-fp8-kv play record under {art}")


def decode(art: Path, run_id: str) -> dict[int, tuple[float, list[float]]]:
    doc = load(art / "local" / run_id / "bench.json")
    return {
        lv["concurrency"]: (lv["decode_tok_s"]["median"], lv["decode_tok_s"].get("ci95") or [])
        for lv in doc["levels"]
    }


def identity(art: Path, base: str, run_id: str) -> str:
    """Token ids and logprobs of every prompt, this run against the baseline's: sglops' own identity check."""
    from sglops.bench.compare import load_run
    from sglops.bench.identity import compare_outputs

    v = compare_outputs(load_run(art / "local" / base), load_run(art / "local" / run_id))
    if v is None:
        return "-"
    return v.line() if hasattr(v, "line") else ("identical" if v.identical else "DIFFERENT")


def top(art: Path, run_id: str) -> str:
    doc = load(art / "local" / run_id / "analysis.json")
    k = doc["by_kernel"][0]
    return f"{k['share']:.1%} {k['name'][:60]} ({doc['scope_gpu_us'] / 1e3:.2f} ms GPU in {doc['scope']})"


def markdown(root: Path) -> str:
    art = root / "artifacts"
    play = play_doc(art)
    steps = {s["id"]: s for s in play["steps"]}
    out = ["| step | does | s | result |", "|---|---|---:|---|"]
    for s in play["steps"]:
        out.append(f"| {s['id']} | {s['do']} | {s['seconds']:.1f} | {s.get('summary') or s['status']} |")
    base = steps["baseline-bench"]["result"]["run_id"]
    rows = [
        ("flashinfer (whole-pool cast)", "1M", base, steps["baseline-restart"]["seconds"]),
        (
            "flashinfer + gather-cast",
            "1M",
            steps["patched-bench"]["result"]["run_id"],
            steps["patched-restart"]["seconds"],
        ),
    ]
    back = load(root / "backends.json") if (root / "backends.json").exists() else {"candidates": []}
    refused = []
    for c in back["candidates"]:
        restart = next((s["seconds"] for s in c["steps"] if s["argv"][0] == "restart"), None)
        if c.get("run_id"):
            rows.append((c["name"], c["pool"], c["run_id"], restart))
        else:
            why = next((s for s in c["steps"] if s["rc"] != 0), {})
            refused.append(
                f"- {c['name']} (pool {c['pool']}): {c.get('outcome')}: "
                f"{(why.get('json') or {}).get('error') or why.get('stderr', '')[-300:]}"
            )
    b = decode(art, base)
    out += [
        "",
        (
            "| candidate | FP8 pool | restart s | decode tok/s C=1 | C=4 | C=8 | x baseline (C=1) | outputs"
            " vs baseline |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, pool, run, restart in rows:
        d = decode(art, run)
        cells = " | ".join(f"{d[c][0]:.1f}" if c in d else "-" for c in (1, 4, 8))
        ratio = d[1][0] / b[1][0] if 1 in d and 1 in b else float("nan")
        ident = "baseline" if run == base else identity(art, base, run)
        out.append(f"| {name} | {pool} | {restart:.1f} | {cells} | {ratio:.2f} | {ident} |")
    out += [
        "",
        *refused,
        "",
        "trace, decode steps (baseline / gather-cast):",
        f"- {top(art, steps['baseline-profile']['result']['run_id'])}",
        f"- {top(art, steps['patched-profile']['result']['run_id'])}",
    ]
    ab = steps.get("ab", {}).get("summary")
    if ab:
        out += ["", f"ab: {ab}"]
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(Path(sys.argv[1])))
