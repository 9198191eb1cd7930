"""Where a kernel's warps stall, instruction by instruction, from Nsight Compute's source page (SASS, CSV).

Why: `ncu --page source --csv --print-source sass` writes one row per SASS instruction with ~80 columns; what
a kernel engineer reads from it is the stall-reason totals and the few instructions that hold most samples
(round 7 of kernels/fp8_mla_decode found 18% of all samples on one instruction this way).

    ncu --import R.ncu-rep --page source --csv --print-source sass > S.csv
    python3 benchmarks/ncu_source_top.py S.csv [--top 25]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """The header and the instruction rows (the file's first
    line names the kernel, the second is the header)."""
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    start = next((i for i, r in enumerate(rows) if SAMPLES in r), None)
    if start is None:
        raise SystemExit(
            f"error: {path}: no '{SAMPLES}' column (export with --page source --csv --print-source sass)"
        )
    header = rows[start]
    return header, [r for r in rows[start + 1 :] if len(r) >= len(header)]


def as_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def summarise(header: list[str], rows: list[list[str]], top: int) -> str:
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    totals = {r: sum(as_int(row[col[r]]) for row in rows) for r in reasons}
    total = sum(totals.values()) or 1
    out = [f"{total} stall samples over {len(rows)} instructions"]
    for reason, n in sorted(totals.items(), key=lambda kv: -kv[1])[:10]:
        out.append(f"  {reason[6:]:<20} {n:>9} {100 * n / total:5.1f}%")
    out.append(f"top {top} instructions by samples (address, SASS, samples, % of all, main reasons):")
    for row in sorted(rows, key=lambda r: -as_int(r[col[SAMPLES]]))[:top]:
        n = as_int(row[col[SAMPLES]])
        main = sorted(((r[6:], as_int(row[col[r]])) for r in reasons), key=lambda kv: -kv[1])[:3]
        why = ", ".join(f"{r} {v}" for r, v in main if v)
        out.append(f"  {row[0][-5:]} {row[1].strip()[:56]:<56} {n:>7} {100 * n / total:5.1f}%  {why}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    if not args.csv.is_file():
        print(f"error: {args.csv}: no such file", file=sys.stderr)
        return 2
    header, rows = read_rows(args.csv)
    print(summarise(header, rows, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
