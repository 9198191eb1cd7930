"""The CUDA kernel's resources and KV-loop instruction mix per kernel, from this machine's nvcc (no GPU).

Why: device time is scarce; the compiler's report and the SASS of the tile loop say before any timing whether
a variant spills, how many CTAs fit, and what one tile costs in each pipe (HMMA, the F2FP conversions, integer
work, shared loads, barriers). Counts are static, per thread, of the body of the longest backward branch (the
KV loop; for a warp-specialised kernel, the consumers' loop).

    python3 kernels/fp8_mla_decode/cu_report.py --arch sm_90a \\
        [--kernels n32_s3_b3_tma4,n32_s3_b3_1b] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# SASS opcode prefixes worth counting in the loop: the tensor pipe, the conversion pipe (F2FP: e4m3x2 -> f16x2
# and the f32 -> f16x2 pack of P), integer/permute work, shared memory, barriers (BAR: CTA or named; SYNCS:
# mbarrier waits/arrives), spills
GROUPS = {
    "HMMA": ("HMMA",),
    "F2FP.E4M3": ("F2FP.F16.E4M3",),
    "F2FP.pack": ("F2FP.F16.F32", "F2FP.PACK"),
    "MUFU": ("MUFU",),
    "PRMT": ("PRMT",),
    "LOP3": ("LOP3",),
    "IMAD/IADD": ("IMAD", "IADD3", "VIADD", "LEA"),
    "LDS": ("LDS",),
    "STS": ("STS",),
    "BAR": ("BAR",),
    "SYNCS": ("SYNCS",),
    "SHFL": ("SHFL",),
    "LDL/STL": ("LDL", "STL"),
}


def cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton

        cand = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if cand.exists():
            return str(cand)
    except ImportError:
        pass
    raise SystemExit("error: no cuobjdump (CUDA toolkit or Triton's package) on this machine")


def loop_counts(sass: str) -> dict:
    """Opcode groups inside the longest backward branch of
    one function's main code, and that body's length."""
    ins = [
        (int(m.group(1), 16), m.group(2))
        for m in re.finditer(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)[^\n]*", sass, re.M)
    ]
    # out-of-line code (an mbarrier wait's retry loop, which jumps back into the tile loop) sits after the
    # first unpredicated EXIT: its branches back would make the "loop" span the epilogue too
    end = min(
        (a for a, op in ins if op == "EXIT" and not re.search(rf"/\*{a:04x}\*/\s+@", sass)), default=1 << 62
    )
    best = None
    for m in re.finditer(
        r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?BRA\s+(?:`\(\S+\)\s*)?0x([0-9a-f]+)", sass, re.M
    ):
        src, dst = int(m.group(1), 16), int(m.group(2), 16)
        if dst < src < end and (best is None or src - dst > best[1] - best[0]):
            best = (dst, src)
    if best is None:
        return {}
    body = Counter(op for a, op in ins if best[0] <= a <= best[1])
    out = {
        k: sum(v for op, v in body.items() if any(op.startswith(p) for p in ps)) for k, ps in GROUPS.items()
    }
    out["instructions"] = sum(body.values())
    return out


def main() -> None:
    # every kernel of the catalogue, not the picks alone
    os.environ.setdefault("SGLOPS_FP8_MLA_VARIANTS", "1")
    from sglops_kernels.fp8_mla_decode import _cuda

    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90a", choices=sorted(_cuda.LIMITS))
    ap.add_argument("--kernels", default="", help="comma-separated _cuda.KERNELS names (default: all)")
    ap.add_argument("--json", default="", help="also write the report here")
    args = ap.parse_args()
    names = [n for n in args.kernels.split(",") if n] or list(_cuda.KERNELS)
    unknown = [n for n in names if n not in _cuda.KERNELS]
    if unknown:
        raise SystemExit(f"error: unknown kernel(s) {','.join(unknown)}; known: {','.join(_cuda.KERNELS)}")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        res = _cuda.resources(_cuda.compile_cubin(args.arch, cubin), args.arch)
        report = {}
        for name in names:
            sass = subprocess.run(
                [cuobjdump(), "-sass", "-fun", f"fp8_mla_{name}", str(cubin)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            report[name] = dict(res.get(name, {}), threads=_cuda.threads_of(name), loop=loop_counts(sass))
    if args.json:
        Path(args.json).write_text(json.dumps({"arch": args.arch, "kernels": report}, indent=1))
    cols = list(GROUPS) + ["instructions"]
    print(f"{args.arch}: per thread, static, in the KV loop; regs/stack/smem/CTAs per SM from ptxas -v")
    print(
        f"{'kernel':30s} {'thr':>3s} {'regs':>4s} {'stk':>4s} {'smem':>6s} {'CTA':>3s} "
        + " ".join(f"{c:>9s}" for c in cols)
    )
    for name, r in report.items():
        loop = r["loop"]
        print(
            f"{name:30s} {r['threads']:3d} {r.get('registers', 0):4d} {r.get('stack', 0):4d}"
            f" {r.get('smem', 0):6d} {r.get('ctas_per_sm', 0):3d} "
            + " ".join(f"{loop.get(c, 0):9d}" for c in cols)
        )


if __name__ == "__main__":
    main()
