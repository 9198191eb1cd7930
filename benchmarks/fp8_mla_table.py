"""The FP8 MLA decode table of record (kernels/fp8_mla_decode/BENCH.md, docs/patches.md) from an H200 run.

Why: BENCH.md's table is what the issue's goals are judged on; it must come from a results JSON by a rule, not
be typed. Per cell it takes the kernel the package would launch on sm90 (its own rule, `_picks.kernel_name`:
the 16-head pick, and at 128 heads the 16-head pick up to `SMALL_BATCH` requests, the 128-head pick above)
unless --pick names one per head class, and prints (f) us, TB/s of FP8 read, % of the copy ceiling measured in
the same run, (f)/(e), (f)/(c), and the goals: >= 80% of copy and <= 0.6x (e) at cells with >= 1M live rows,
never slower than (c).

    python3 benchmarks/fp8_mla_table.py \\
        benchmarks/results/fp8-mla-decode-h200/cuda-2026-12-03/round7c-fp8_mla_variants.json
    python3 benchmarks/fp8_mla_table.py RUN.json --pick 16=n32_s3_b3_1b,128=n32_s4_b2_1b

Since v0.6 the harness of record is benchmarks/gpu_fp8_mla_record.py (distinct rows, NaN poison, ragged and
small cells, vLLM TRITON_MLA, physical floors); its JSON ("cells") gives the issue-37 table:

    python3 benchmarks/fp8_mla_table.py benchmarks/results/fp8-mla-v06-2026-12-06/record.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PICKS_PY = ROOT / "kernels" / "fp8_mla_decode" / "sglops_kernels" / "fp8_mla_decode" / "_picks.py"
# the goals apply at cells with at least this many live rows
MIN_ROWS = 1 << 20
GOAL_PCT, GOAL_E = 80.0, 0.6


def load_picks() -> ModuleType:
    """The package's pick rule and picks (`_picks.py`, loaded alone: the package itself imports torch)."""
    spec = importlib.util.spec_from_file_location("fp8_mla_picks", PICKS_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(run: dict, kernel_for: Callable[[int, int], str]) -> list[dict]:
    copy = run["copy"]["TBps"]
    out = []
    for cell in run["table"]:
        name = "cu_" + kernel_for(cell["heads"], cell["bs"])
        if name not in cell["us"]:
            raise SystemExit(f"error: {name} was not timed in this run (timed: {', '.join(cell['us'])})")
        us = cell["us"][name]
        tbps = cell["live_rows"] * 576 / (us * 1e-6) / 1e12
        out.append(
            dict(
                heads=cell["heads"],
                ctx=cell["ctx"],
                bs=cell["bs"],
                rows=cell["live_rows"],
                kernel=name[3:],
                us=us,
                c=cell["c_us"],
                e=cell["e_us"],
                tbps=tbps,
                pct=100 * tbps / copy,
                fe=us / cell["e_us"],
                fc=us / cell["c_us"],
            )
        )
    return out


def markdown(table: list[dict], copy: float) -> str:
    lines = [
        (
            f"copy ceiling in the same run: {copy:.2f} TB/s; goals at >= 1M live rows: >= {GOAL_PCT:.0f}% of"
            f" copy, (f)/(e) <= {GOAL_E}; everywhere (f)/(c) <= 1"
        ),
        "",
        (
            "| heads | ctx | bs | live rows | kernel | (f) µs | (c) µs | (e) µs | TB/s FP8 read | % of copy |"
            " (f)/(e) | (f)/(c) |"
        ),
        "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        big = r["rows"] >= MIN_ROWS
        pct = f"{r['pct']:.1f}%" + (" *" if big and r["pct"] < GOAL_PCT else "")
        fe = f"{r['fe']:.2f}" + (" *" if big and r["fe"] > GOAL_E else "")
        fc = f"{r['fc']:.2f}" + (" *" if r["fc"] > 1 else "")
        lines.append(
            f"| {r['heads']} | {r['ctx'] // 1024}K | {r['bs']} | {r['rows'] / 1e6:.2f}M | {r['kernel']} | "
            f"**{r['us']:.1f}** | {r['c']:.1f} | {r['e']:.1f} | {r['tbps']:.2f} | {pct} | {fe} | {fc} |"
        )
    lines.append("")
    lines.append("`*`: the goal is missed at that cell.")
    return "\n".join(lines)


def record_markdown(run: dict) -> str:
    """The table of a gpu_fp8_mla_record.py run: per cell (f) µs, % of copy (the FP8 bytes of the live rows at
    the run's copy bandwidth over (f)), x vLLM TRITON_MLA (its time over (f)), (f) over the BF16 byte floor,
    (f) over the launch floor (an empty kernel of the decode's grid + the merge, one graph) and over launch
    floor + FP8 byte floor, max abs error vs fp32 of (f) and of vLLM, the sm120 pick run here, v0.5's launch
    in the same run. `*`: a missed goal (16 heads: >= 80% of copy at >= 1M live rows; small cells: within 2x
    of the launch floor)."""
    bw = run["copy_bytes_per_s"]
    nan = float("nan")
    lines = [
        (
            f"{run['device']}, {run['sms']} SMs; copy {bw / 1e12:.2f} TB/s (bytes read + written per second)"
            f" in the same run; package {run['package_version']}, pick {run['pick']} (sm120 pick"
            f" {run['sm120_pick']} run here as a proxy); µs per layer"
        ),
        "",
        (
            "| cell | heads | live rows | (f) µs | % of copy | x vLLM | (f)/(BF16 floor) | launch floor µs |"
            " (f)/(launch) | (f)/(launch + FP8) | err (f) | err vLLM | sm120 µs | v0.5 µs | vLLM µs |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in run["cells"]:
        f = c["f_us"]
        pct = 100 * c["fp8_floor_us"] / f
        miss_pct = c["heads"] == 16 and c["live_rows"] >= MIN_ROWS and pct < GOAL_PCT
        lf = c.get("launch_floor_us", nan)
        small = c["cell"].startswith("small")
        vl = c.get("vllm_us", nan)
        verr = c["vllm_err"]["max_abs_err"] if "vllm_err" in c else nan
        lines.append(
            f"| {c['cell']} | {c['heads']} | {c['live_rows'] / 1e6:.2f}M | **{f:.1f}** |"
            f" {pct:.1f}%{' *' if miss_pct else ''} | {vl / f:.2f} | {f / c['bf16_floor_us']:.2f} | {lf:.1f}"
            f" | {f / lf:.2f}{' *' if small and f > 2 * lf else ''} | {f / (lf + c['fp8_floor_us']):.2f} |"
            f" {c['f_err']['max_abs_err']:.1e} | {verr:.1e} | {c['sm120_us']:.1f} |"
            f" {c.get('v05_us', nan):.1f} | {vl:.1f} |"
        )
    lines.append("")
    lines.append("`*`: the goal is missed at that cell.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="fp8_mla_variants.json of benchmarks/gpu_fp8_mla_variants.py")
    ap.add_argument("--pick", default="", help="16=KERNEL,128=KERNEL (default: the package's sm90 picks)")
    ap.add_argument("--heads", default="", help="only these head counts, comma-separated")
    args = ap.parse_args(argv)
    try:
        run = json.loads(args.run.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {args.run}: {exc}", file=sys.stderr)
        return 2
    if "cells" in run:
        print(record_markdown(run))
        return 0
    rule = load_picks()
    picks = dict(rule.DEFAULT["sm90"])
    for part in filter(None, args.pick.split(",")):
        heads, _, name = part.partition("=")
        if heads not in ("16", "128") or not name:
            print(f"error: --pick {part!r}: expected 16=KERNEL or 128=KERNEL", file=sys.stderr)
            return 2
        picks[int(heads)] = name
    if "table" not in run or "copy" not in run:
        print(f"error: {args.run}: not a variants run (no 'table' / 'copy')", file=sys.stderr)
        return 2
    if args.heads:
        run = dict(run, table=[c for c in run["table"] if str(c["heads"]) in args.heads.split(",")])
    print(
        markdown(rows(run, lambda heads, bs: rule.kernel_name(heads, "sm90", bs, picks)), run["copy"]["TBps"])
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
