"""Ahead-of-time compile of the split kernel for a GPU that is not here (sm_120 from an H200 or a
CPU box), and the resources ptxas reports: registers, shared memory, spills, against the target's
limits. Needs Triton (its bundled ptxas); no GPU.

    PYTHONPATH=kernels/fp8_mla_decode python kernels/fp8_mla_decode/aot.py --cc 120 [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

# per-block limits: shared memory a block may opt into, registers a thread may have
LIMITS = {
    90: {"smem": 227 * 1024, "regs": 255},
    120: {"smem": 99 * 1024, "regs": 255},
    100: {"smem": 227 * 1024, "regs": 255},
    89: {"smem": 99 * 1024, "regs": 255},
}

SIG = {
    "q_ptr": "*bf16",
    "pool_ptr": "*u8",
    "indptr_ptr": "*i32",
    "ids_ptr": "*i32",
    "lens_ptr": "*i32",
    "part_ptr": "*fp32",
    "lse_ptr": "*fp32",
    "out_ptr": "*bf16",
    "sm_scale": "fp32",
    "kv_scale": "fp32",
    "heads": "i32",
    "pool_stride": "i32",
    "q_sb": "i32",
    "q_sh": "i32",
    "o_sb": "i32",
    "o_sh": "i32",
    "n_splits": "i32",
}


def cuobjdump_path() -> str:
    import triton

    base = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    return os.environ.get("TRITON_CUOBJDUMP_PATH") or os.path.join(base, "cuobjdump")


def compile_one(cc: int, cfg: dict, page: int = 1, direct: bool = False, variant: str | None = None) -> dict:
    """Compile _split_kernel (or, with `variant`, _variants._split_kernel_v with a variant's resolved
    configuration, f16/prefetch/vmode keys included) for sm_<cc> with cfg; return ptxas's resource report."""
    import triton
    import triton.language as tl
    from sglops_kernels.fp8_mla_decode import _triton as impl
    from sglops_kernels.fp8_mla_decode import _variants
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    const = {"PAGE": page, "CKV": 512, "KPE": 64, "BLOCK_H": cfg["block_h"], "BLOCK_N": cfg["block_n"]}
    if variant is None:
        fn = impl._split_kernel
        const.update({"DOT": tl.bfloat16, "TRANS": cfg["trans"], "DIRECT": int(direct)})
    # the parameter order of _split_kernel_v
    else:
        fn = _variants._split_kernel_v
        kdt = tl.float16 if cfg["f16"] else tl.bfloat16
        const.update(
            {
                "DOT": kdt,
                "KDT": kdt,
                "PREFETCH": cfg["prefetch"],
                "DIRECT": int(direct),
                "TRANS": cfg.get("trans", 0),
                "VMODE": cfg.get("vmode", 0),
                "ALU": cfg.get("alu", 0),
            }
        )
    sig = dict(SIG, **{k: "constexpr" for k in const})
    # what the JIT would specialise at run time: 16-byte aligned pointers, strides divisible by 16
    # (576-byte rows); without these hints the loads are scalar and nothing is pipelined
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
        target=GPUTarget("cuda", cc, 32),
        options={"num_warps": cfg["warps"], "num_stages": cfg["stages"]},
    )
    ptx = k.asm["ptx"]
    # Triton ran ptxas itself (the cubin is sm_<arch>); read the resources back from the cubin
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.cubin")
        with open(p, "wb") as f:
            f.write(k.asm["cubin"])
        res = subprocess.run([cuobjdump_path(), "--dump-resource-usage", p], capture_output=True, text=True)
        sass = subprocess.run([cuobjdump_path(), "--dump-sass", p], capture_output=True, text=True).stdout
    text = res.stdout + res.stderr
    regs = re.search(r"REG:(\d+)", text)
    stack = re.search(r"STACK:(\d+)", text)
    local = re.search(r"LOCAL:(\d+)", text)
    local_bytes = int(local.group(1)) if local else None
    smem = int(k.metadata.shared)

    lim = LIMITS.get(cc, LIMITS[90])
    out = {
        "cc": cc,
        "variant": variant or "default",
        "config": cfg,
        "page": page,
        "direct": direct,
        "registers": int(regs.group(1)) if regs else None,
        "shared_bytes": smem,
        "local_bytes": local_bytes,
        "stack_bytes": int(stack.group(1)) if stack else None,
        "mma": mma_kind(ptx),
        "sass_mma": sorted({m for m in re.findall(r"\b(HGMMA|HMMA|QGMMA|IMMA)\b", sass)}),
        "async_copies": k.asm["ttgir"].count("async_copy_global_to_local"),
        "sass_local_ops": len(re.findall(r"\b(LDL|STL)\b", sass)),
        "resource_line": text.strip()[-300:],
        "limits": lim,
        "ptxas_rc": res.returncode,
    }
    out["fits"] = (
        res.returncode == 0
        and out["registers"] is not None
        and out["registers"] <= lim["regs"]
        and smem <= lim["smem"]
    )
    # register spills show as a stack frame and local loads/stores (LDL/STL) in the SASS
    out["spills"] = bool(out["stack_bytes"] or out["sass_local_ops"])
    if res.returncode:
        out["ptxas_error"] = text[-800:]
    return out


# (block_h, block_n, warps, stages, trans)
SWEEP = [
    (bh, bn, w, st, tr)
    for bh in (16, 32, 64, 128)
    for bn in (32, 64)
    for w in (4, 8)
    for st in (1, 2, 3)
    for tr in (0, 1)
]


def mma_kind(ptx: str) -> str:
    if "wgmma.mma_async" in ptx:
        return "wgmma"
    if "mma.sync" in ptx:
        return "mma.sync"
    return "none (fma)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", type=int, default=120)
    ap.add_argument("--family", default=None, help="config table (sm90, sm120); default from --cc")
    ap.add_argument("--json")
    ap.add_argument("--sweep", action="store_true", help="every candidate of SWEEP, page 1, not direct")
    ap.add_argument(
        "--variant",
        default=None,
        help="a _variants.VARIANTS name: its configuration for this family "
        "(16 heads; _variants.FAMILY_OVERRIDES adapt it to the family's shared memory)",
    )
    args = ap.parse_args()
    from sglops_kernels.fp8_mla_decode import _triton as impl
    from sglops_kernels.fp8_mla_decode import _variants

    family = args.family or ("sm120" if args.cc >= 120 else "sm90")
    rows = []
    if args.variant:
        if args.variant not in _variants.VARIANTS or _variants.VARIANTS[args.variant] is None:
            raise SystemExit(
                f"error: --variant takes one of {','.join(n for n, v in _variants.VARIANTS.items() if v)}"
            )
        cfg = _variants.variant_config(args.variant, impl.config_for(16, family), family)
        todo = [(16, cfg, (1, 64), (False, True))]
    elif args.sweep:
        todo = [
            (0, dict(zip(("block_h", "block_n", "warps", "stages", "trans"), c, strict=True)), (1,), (False,))
            for c in SWEEP
        ]
    else:
        todo = [(heads, cfg, (1, 64), (False, True)) for heads, cfg in impl.CONFIGS[family].items()]
    for heads, cfg, pages, directs in todo:
        for page in pages:
            for direct in directs:
                try:
                    r = compile_one(args.cc, cfg, page, direct, args.variant)
                # report, keep going
                except Exception as exc:
                    r = {
                        "cc": args.cc,
                        "config": cfg,
                        "page": page,
                        "direct": direct,
                        "error": f"{type(exc).__name__}: {exc}"[:400],
                        "fits": False,
                    }
                r["heads"] = heads
                rows.append(r)
                print(
                    json.dumps({k: v for k, v in r.items() if k not in ("limits", "config")} | {"cfg": cfg}),
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if not r.get("fits") or r.get("spills")]
    print(f"sm_{args.cc}: {len(rows) - len(bad)}/{len(rows)} specialisations fit without spills", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
