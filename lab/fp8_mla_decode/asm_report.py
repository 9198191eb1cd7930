"""Compile one split-stage kernel for sm_90a on the CPU (Triton's own ptxas, no GPU) and count what
matters in its loop: conversions (F2F is the 16/clk/SM scalar one), global loads (synchronous LDG vs
cp.async LDGSTS), shared-memory traffic (LDS.U8 byte loads vs ldmatrix LDSM), MMAs, spills. Dumps
TTGIR/PTX/SASS to --dump. The evidence behind NOTES.md, "Why v0.2 is slow".

    PYTHONPATH=kernels/fp8_mla_decode python kernels/fp8_mla_decode/asm_report.py base --dump /tmp/k
    PYTHONPATH=kernels/fp8_mla_decode python kernels/fp8_mla_decode/asm_report.py f16pf --warps 8 --stages 1
    # 128 heads
    PYTHONPATH=kernels/fp8_mla_decode python kernels/fp8_mla_decode/asm_report.py cpa_vm --block-h 32

Besides the whole-kernel SASS counts it reports the KV loop's TTGIR (synchronous tt.load vs
async_copy_global_to_local, and the depth of the FP8 byte rings the pipeliner allocated), per-row
conversion and byte-load counts (static count per thread x threads / rows per tile), the CTAs per SM
that registers and shared memory allow, and the DRAM bytes in flight per SM while a tile computes
((ring depth - 1) x rows x 576 x CTAs) - a prediction of the latency hiding, not a measurement.
Every variant's report: asm_variants_sm90a.jsonl (record_asm.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from collections import Counter

import aot

KEYS = (
    "F2F.",
    "F2FP.",
    "LDG.",
    "LDGSTS",
    "LDS.U8",
    "LDS",
    "LDSM",
    "STS",
    "HMMA",
    "HGMMA",
    "BAR.SYNC",
    "LDL",
    "STL",
)


def sass_loop_counts(sass: str) -> dict:
    """Loads and conversions per thread inside the KV loop of the SASS: the body of the backward branch
    that spans the most instructions (the merge and epilogue have no loop of that size)."""
    ins = [
        (int(m.group(1), 16), m.group(2))
        for m in re.finditer(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)[^\n]*", sass, re.M)
    ]
    best = None
    for m in re.finditer(
        r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?BRA\s+(?:`\(\S+\)\s*)?0x([0-9a-f]+)", sass, re.M
    ):
        src, dst = int(m.group(1), 16), int(m.group(2), 16)
        if dst < src and (best is None or src - dst > best[1] - best[0]):
            best = (dst, src)
    if best is None:
        return {}
    body = Counter(op for a, op in ins if best[0] <= a <= best[1])
    pick = {
        "LDG": "LDG.",
        "LDGSTS": "LDGSTS",
        "e4m3x2 cvt": "F2FP.F16.E4M3",
        "F2F": "F2F.",
        "LDS.U8": "LDS.U8",
        "LDSM": "LDSM",
        "HMMA": "HMMA",
        "HGMMA": "HGMMA",
        "LDL": "LDL",
        "STL": "STL",
        "PRMT": "PRMT",
    }
    return {k: sum(v for op, v in body.items() if op.startswith(p)) for k, p in pick.items()}


def ops_like(ops: Counter, prefix: str) -> int:
    return sum(v for op, v in ops.items() if op.startswith(prefix))


def loop_body(ttgir: str) -> str:
    """The TTGIR of the KV loop (the first scf.for of the kernel, to its closing brace)."""
    lines = ttgir.splitlines()
    for i, line in enumerate(lines):
        if "scf.for" in line:
            indent = len(line) - len(line.lstrip())
            for j in range(i + 1, len(lines)):
                if (
                    lines[j].startswith(" " * indent + "}")
                    and len(lines[j]) - len(lines[j].lstrip()) == indent
                ):
                    return "\n".join(lines[i : j + 1])
            return "\n".join(lines[i:])
    return ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variant", help="base (_triton._split_kernel) or a _variants.VARIANTS name")
    ap.add_argument("--block-h", type=int, default=16)
    ap.add_argument("--block-n", type=int, default=None)
    ap.add_argument("--warps", type=int, default=None)
    ap.add_argument("--stages", type=int, default=None)
    ap.add_argument("--page", type=int, default=1)
    ap.add_argument("--cc", type=int, default=90)
    ap.add_argument("--dump", default=None)
    args = ap.parse_args()
    import triton
    import triton.language as tl
    from sglops_kernels.fp8_mla_decode import _triton, _variants
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cfg = {"block_h": args.block_h, "block_n": 32, "warps": 4, "stages": 3, "trans": 0}
    if args.variant != "base":
        cfg = _variants.variant_config(args.variant, cfg)
    cfg.update(
        {
            k: v
            for k, v in (("block_n", args.block_n), ("warps", args.warps), ("stages", args.stages))
            if v is not None
        }
    )
    const = {"PAGE": args.page, "CKV": 512, "KPE": 64, "BLOCK_H": cfg["block_h"], "BLOCK_N": cfg["block_n"]}
    if args.variant == "base":
        fn = _triton._split_kernel
        const.update({"DOT": tl.bfloat16, "TRANS": cfg["trans"], "DIRECT": 0})
    else:
        fn = _variants._split_kernel_v
        kdt = tl.float16 if cfg["f16"] else tl.bfloat16
        const.update(
            {
                "DOT": kdt,
                "KDT": kdt,
                "PREFETCH": cfg["prefetch"],
                "DIRECT": 0,
                "TRANS": cfg.get("trans", 0),
                "VMODE": cfg.get("vmode", 0),
                "ALU": cfg.get("alu", 0),
            }
        )
    sig = dict(aot.SIG, **{k: "constexpr" for k in const})
    aligned = [
        i
        for i, k in enumerate(sig)
        if k.endswith("_ptr") or k in ("pool_stride", "q_sb", "q_sh", "o_sb", "o_sh")
    ]
    src = ASTSource(
        fn=fn,
        signature=sig,
        constexprs={(i,): const[k] for i, k in enumerate(sig) if k in const},
        attrs={(i,): [["tt.divisibility", 16]] for i in aligned},
    )
    k = triton.compile(
        src,
        target=GPUTarget("cuda", args.cc, 32),
        options={"num_warps": cfg["warps"], "num_stages": cfg["stages"]},
    )
    dump = args.dump or f"/tmp/fp8_mla_asm_{args.variant}"
    os.makedirs(dump, exist_ok=True)
    for ext in ("ttgir", "ptx"):
        with open(os.path.join(dump, f"k.{ext}"), "w") as f:
            f.write(k.asm[ext])
    cubin = os.path.join(dump, "k.cubin")
    with open(cubin, "wb") as f:
        f.write(k.asm["cubin"])
    sass = subprocess.run([aot.cuobjdump_path(), "--dump-sass", cubin], capture_output=True, text=True).stdout
    res = subprocess.run(
        [aot.cuobjdump_path(), "--dump-resource-usage", cubin], capture_output=True, text=True
    ).stdout
    with open(os.path.join(dump, "k.sass"), "w") as f:
        f.write(sass)
    ops = Counter(
        m.group(1)
        for m in re.finditer(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", sass, re.M)
    )
    counts = {key: sum(v for op, v in ops.items() if op.startswith(key)) for key in KEYS}
    counts["LDS"] -= counts["LDS.U8"]
    in_loop = sass_loop_counts(sass)
    ttgir = k.asm["ttgir"]
    body = loop_body(ttgir)
    rings = sorted(
        {int(m.group(1)) for m in re.finditer(r"local_alloc : \(\) -> !ttg.memdesc<(\d+)x\d+x\d+xi8", ttgir)}
    )
    regs, smem = int(re.search(r"REG:(\d+)", res).group(1)), int(k.metadata.shared)
    # CTAs per SM by registers (64 K per SM, allocated per warp in 256-register units) and by shared memory
    # (228 KB per SM, 227 KB per block, 1 KB reserved per block): what the grid's programs_per_sm should be
    per_warp = -(-regs * 32 // 256) * 256
    # per SM: H100/H200 228 KB, RTX PRO 6000 (sm_120) 100 KB
    sm_smem = {120: 100 * 1024}.get(args.cc, 228 * 1024)
    ctas = min(65536 // (per_warp * cfg["warps"]), sm_smem // (smem + 1024), 32)
    threads = 32 * cfg["warps"]
    per_row = {
        "e4m3x2_cvt": ops_like(ops, "F2FP.F16.E4M3") * threads // cfg["block_n"],
        "F2F": counts["F2F."] * threads // cfg["block_n"],
        "LDS.U8": counts["LDS.U8"] * threads // cfg["block_n"],
    }
    ring = max(rings) if rings else 0
    print(
        json.dumps(
            {
                "variant": args.variant,
                "config": cfg,
                "ctas_per_sm": ctas,
                "per_row_per_cta (static SASS count x threads / rows)": per_row,
                "dram_bytes_ahead_per_sm": max(0, ring - 1) * cfg["block_n"] * 576 * ctas,
                "registers": re.search(r"REG:(\d+)", res).group(1),
                "stack": re.search(r"STACK:(\d+)", res).group(1),
                "shared": k.metadata.shared,
                "sass": counts,
                "ttgir": {
                    "tt.load": ttgir.count("tt.load "),
                    "async_copy": ttgir.count("async_copy_global_to_local"),
                    "convert_layout": ttgir.count("ttg.convert_layout"),
                    "fp_to_fp": ttgir.count("tt.fp_to_fp"),
                    "local_alloc": ttgir.count("ttg.local_alloc"),
                },
                "sass_loop (the longest backward branch's body: the KV loop)": in_loop,
                "loop": {
                    "sync tt.load": body.count("tt.load "),
                    "async_copy": body.count("async_copy_global_to_local"),
                    "sync loads of rows": len(re.findall(r"tt.load .*tensor<\d+x\d+x!tt.ptr<i8>", body)),
                    "fp_to_fp": body.count("tt.fp_to_fp"),
                    "byte-ring depth": rings,
                },
                "dump": dump,
            }
        )
    )


if __name__ == "__main__":
    main()
