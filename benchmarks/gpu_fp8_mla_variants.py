"""A/B of the split-stage variants of the FP8 MLA decode kernel (kernels/fp8_mla_decode,
lab/fp8_mla_decode/_variants.py) against the current kernel, on a GPU host (not in CI).

One call (< 4 min; `OUT=$OUT bash lab/fp8_mla_decode/h200_variants.sh` wraps the lines below):
precompile every variant in parallel processes; per variant, correctness against
fp32 attention (16 and 128 heads, page 1 and 64, several splits and one, a stale tail of wild ids)
beside FlashInfer's BF16 error on the same case; then ctx 4K/32K/128K x bs 1/16/64 x heads 16/128:
(c) gather-cast + FlashInfer and (e) the BF16 floor and the current kernel ("base", the configuration
the 2026-12-03 H200 sweep picked) through benchmarks/gpu_fp8_mla_decode.py's `table`, each variant
through its `f_graph`/`Timer` (8 layers, one graph, L2 flushed before every replay). Writes
$OUT/fp8_mla_variants.json and prints a table.

Environment: exactly kernels/fp8_mla_decode/h200_run.sh's (carry [".whl"]; its pip install, FlashInfer
tarball and exports), from the repository root on the device machine:
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
        .whl/*.whl && mkdir -p /tmp/fi && tar -xJf .whl/flashinfer-0.7.2-mla.tar.xz -C /tmp/fi && \\
    export PYTHONPATH=/tmp/fi:/tmp/site:$PWD/kernels/fp8_mla_decode:$PWD/kernels/gather_cast \\
        FLASHINFER_WORKSPACE_BASE=/tmp/fiws TVM_FFI_CACHE_DIR=/tmp/tvm \\
        CUDA_HOME=$(readlink -f /usr/local/cuda) && \\
    timeout 220 python3 benchmarks/gpu_fp8_mla_variants.py --out $OUT --budget 190 \\
        > $OUT/variants.txt 2>&1; \\
    tail -60 $OUT/variants.txt
`--list` prints each variant's resolved configuration per
head count without a GPU (tests/test_fp8_mla_decode.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the Triton split-stage variants (_variants.py) left the package in v0.6
LAB = ROOT / "lab" / "fp8_mla_decode"
sys.path.insert(0, str(LAB))
T0 = time.time()
# the configurations the H200 sweep picked (benchmarks/results/fp8-mla-decode-h200/bench.txt, "picked")
PICKED = {
    16: {
        "trans": 0,
        "block_h": 16,
        "block_n": 32,
        "warps": 4,
        "stages": 3,
        "programs_per_sm": 2,
        "min_rows": 256,
    },
    128: {
        "trans": 0,
        "block_h": 64,
        "block_n": 32,
        "warps": 8,
        "stages": 2,
        "programs_per_sm": 1,
        "min_rows": 256,
    },
}
# per head class: variant -> overrides of PICKED (absent: not run). sm_90a ptxas (asm_report.py): 16 heads,
# prefetch, 32 rows x 8 warps: 176 registers, no spills (4 warps: 72-byte stack); 64 rows x 8 warps: 255,
# 8-byte stack. 128 heads: every 64-head block spills (its 64 x 512 fp32 accumulator: 8 warps 352-440-byte
# stack, 16 warps 976), so the prefetch variants take 32-head blocks x 8 warps (215 registers, none)
OVERRIDES = {
    16: {
        "f16": {},
        "pf": {"warps": 8},
        "f16pf": {"warps": 8},
        "f16pf_n64": {},
        "f16pf_w4": {},
        "f16pf2": {},
        "f16pf_t64": {},
        # K and V as two cp.async rings (asm_report.py, sm_90a): programs_per_sm = the CTAs that fit by
        # shared memory and registers, so the split policy fills 132 SMs with one wave of resident programs
        "cpa": {"programs_per_sm": 1},
        "cpa_w4": {"programs_per_sm": 2},
        "cpa_vm": {"programs_per_sm": 1},
        "cpa_vm_s6": {"programs_per_sm": 1},
        "cpa_vm_w4": {"programs_per_sm": 1},
        "cpa_vm_n16": {"programs_per_sm": 2},
        "cpa_vm_n16w2": {"programs_per_sm": 2},
        "cpa_vm_n64": {"programs_per_sm": 1},
        "cpa_vm_w4_alu": {"programs_per_sm": 1},
        "cpa_vm_n16_alu": {"programs_per_sm": 2},
        "cpa_vm_n16_alu2": {"programs_per_sm": 2},
    },
    128: {
        "f16": {},
        "pf": {"block_h": 32, "warps": 8},
        "f16pf": {"block_h": 32, "warps": 8},
        "f16pf2": {"block_h": 32},
        # 32-head blocks (208 registers, no spills; a 64-head block spills 400 B): the 4 CTAs of one
        # request's split are adjacent in the grid (head block is its fastest axis), so 3 of 4 reads of a
        # tile hit L2
        "cpa_vm": {"block_h": 32, "programs_per_sm": 1},
        # the picked 64-head block (wgmma) with the ring: spills 400 B (base: 336), loads asynchronous
        "cpa_h64": {"block_h": 64, "programs_per_sm": 1},
    },
}
# what a run times unless --variants says otherwise: the two best of 2026-12-03 beside the new ones
DEFAULT_VARIANTS = (
    "base,f16pf_w4,f16pf_n64,cpa,cpa_w4,cpa_vm,cpa_vm_s6,cpa_vm_w4,cpa_vm_n16,cpa_vm_n16w2,cpa_vm_n64,"
    "cpa_vm_w4_alu,cpa_vm_n16_alu,cpa_vm_n16_alu2,cpa_h64"
)
CELLS = [(ctx, bs) for ctx in (4096, 32768, 131072) for bs in (1, 16, 64)]


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def load_harness():
    spec = importlib.util.spec_from_file_location(
        "gpu_fp8_mla_decode", ROOT / "benchmarks" / "gpu_fp8_mla_decode.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cfg_for(name: str, heads: int) -> dict | None:
    import _variants as V

    # the CUDA kernel (sglops_kernels/fp8_mla_decode/fp8_mla_decode.cu): 16-head CTAs at any head count
    if name.startswith("cu_"):
        from sglops_kernels.fp8_mla_decode import _cuda

        # _m64: shorter splits
        key, min_rows = (name[3:-4], 64) if name.endswith("_m64") else (name[3:], 256)
        return _cuda.config_of(key, min_rows)
    cls = 16 if heads <= 16 else 128
    if name == "base":
        return dict(PICKED[cls])
    over = OVERRIDES[cls].get(name)
    if over is None:
        return None
    return V.variant_config(name, dict(PICKED[cls], **over))


def shim(name: str):
    """A module-like object with the harness's mla_decode/workspace calls, running variant `name`
    (its configuration is resolved from the config the harness passes in)."""
    import _variants as V
    from sglops_kernels.fp8_mla_decode import _triton as base

    if name.startswith("cu_"):
        from sglops_kernels.fp8_mla_decode import _cuda

        return types.SimpleNamespace(mla_decode=_cuda.mla_decode, workspace=base.workspace)

    def mla_decode(q, pool, indptr, ids, sm_scale, kv_scale, splits, out, ws=None, config=None, **kw):
        return V.mla_decode_variant(
            name, q, pool, indptr, ids, sm_scale, kv_scale, splits, out, ws, config=config, **kw
        )

    return types.SimpleNamespace(mla_decode=mla_decode, workspace=base.workspace)


PRECOMPILE = r"""
import json, sys, torch
sys.path.insert(0, "LABDIR")
import _variants as V
for line in sys.argv[1:]:
    j = json.loads(line)
    pool = torch.zeros(4096, 1, 576, dtype=torch.uint8, device="cuda")
    q = torch.zeros(2, j["heads"], 576, dtype=torch.bfloat16, device="cuda")
    indptr = torch.tensor([0, 100, 300], dtype=torch.int32, device="cuda")
    ids = torch.arange(300, dtype=torch.int32, device="cuda")
    try:
        for s in (1, 3):
            V.mla_decode_variant(j["name"], q, pool, indptr, ids, 0.1, 1.0, s, config=j["cfg"])
            paged = pool.view(64, 64, 576)
            V.mla_decode_variant(j["name"], q, paged, indptr, ids % 60, 0.1, 1.0, s, config=j["cfg"],
                                 page_size=64, kv_lens=indptr[1:] - indptr[:-1])
        torch.cuda.synchronize()
    except Exception as exc:
        print("precompile error", line, repr(exc)[:300], flush=True)
"""


def precompile(names, heads_list) -> None:
    jobs = [
        json.dumps({"name": n, "heads": h, "cfg": base_cfg_of(n, h)})
        for h in heads_list
        for n in names
        if cfg_for(n, h) is not None and not n.startswith("cu_")
    ]
    if not jobs:
        return
    # one job each: the slowest (f16pf_t64, spilling) sets the pace
    nproc = max(1, min(16, len(jobs)))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PRECOMPILE.replace("LABDIR", str(LAB)), *jobs[i::nproc]],
            env=os.environ.copy(),
        )
        for i in range(nproc)
    ]
    for p in procs:
        p.wait()


def base_cfg_of(name: str, heads: int) -> dict:
    """What to pass as `config` to mla_decode_variant (the variant applies its own overrides)."""
    if name.startswith("cu_"):
        return cfg_for(name, heads)
    cls = 16 if heads <= 16 else 128
    return dict(PICKED[cls], **(OVERRIDES[cls].get(name) or {})) if name != "base" else dict(PICKED[cls])


def correctness(H, fi, names, out, gen) -> None:
    import torch
    from flashinfer.mla import BatchMLAPagedAttentionWrapper
    from sglops_kernels.fp8_mla_decode import reference, splits_for, workspace

    pool = (torch.randn(H.POOL_ROWS, 1, H.CKV + H.KPE, generator=gen, device="cuda") * 0.5).to(
        torch.float8_e4m3fn
    )
    whole = pool.to(torch.bfloat16)
    ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = out.setdefault("correctness", [])
    for heads in (16, 128):
        for bs, max_len in ((4, 4096), (1, 32768)):
            seq, indptr, ids = fi.batch(gen, bs, H.POOL_ROWS, max_len=max_len)
            n = int(indptr[-1])
            # stale tail: wild ids
            idbuf = torch.full((n + 4096,), 2**30, dtype=torch.int32, device="cuda")
            idbuf[:n] = ids
            q = torch.randn(bs, heads, H.CKV + H.KPE, generator=gen, device="cuda").to(torch.bfloat16)
            r32 = fi.fp32_reference(q, whole, indptr, ids, H.SM_SCALE)
            w = BatchMLAPagedAttentionWrapper(ws, backend="fa3")
            fi.sglang_plan(
                w, indptr.new_tensor(range(bs + 1)), indptr, ids, seq, heads, H.SM_SCALE, torch.bfloat16
            )
            fi_out = fi.sglang_run(
                w, q, whole, torch.empty(bs, heads, H.CKV, dtype=torch.bfloat16, device="cuda")
            )
            fi_err = float((fi_out.float() - r32).abs().max())
            # page 64: the same pool as [pages, 64, 576], a random page table, kv_lens on the device
            page = 64
            pages_total = H.POOL_ROWS // page
            pool_pages = pool[: pages_total * page].view(pages_total, page, H.CKV + H.KPE)
            npages = [(int(s) + page - 1) // page for s in seq.tolist()]
            pind = torch.zeros(bs + 1, dtype=torch.int32, device="cuda")
            pind[1:] = torch.cumsum(torch.tensor(npages, device="cuda"), 0)
            pids = torch.randperm(pages_total, generator=torch.Generator().manual_seed(7))[: sum(npages)]
            pids = pids.to(torch.int32).cuda()
            lens = seq.to(torch.int32).cuda()
            q_ref64 = reference(q, pool_pages, pind, pids, H.SM_SCALE, 1.0, page_size=page, kv_lens=lens)
            for name in names:
                cfg = cfg_for(name, heads)
                if cfg is None:
                    continue
                row = {"variant": name, "heads": heads, "bs": bs, "max_len": max_len, "fi_bf16_err": fi_err}
                try:
                    splits = splits_for(bs, heads, max_len, sms, cfg)
                    errs = {}
                    for label, s in (("split", splits), ("one", 1)):
                        got = torch.full_like(fi_out, float("nan"))
                        wsp = workspace(bs, heads, s, "cuda") if s > 1 else None
                        shim(name).mla_decode(
                            q,
                            pool,
                            indptr,
                            idbuf,
                            H.SM_SCALE,
                            1.0,
                            s,
                            got,
                            wsp,
                            config=base_cfg_of(name, heads),
                        )
                        torch.cuda.synchronize()
                        errs[label] = (
                            float("nan") if torch.isnan(got).any() else float((got.float() - r32).abs().max())
                        )
                    got = torch.full_like(fi_out, float("nan"))
                    shim(name).mla_decode(
                        q,
                        pool_pages,
                        pind,
                        pids,
                        H.SM_SCALE,
                        1.0,
                        splits,
                        got,
                        workspace(bs, heads, splits, "cuda") if splits > 1 else None,
                        page_size=page,
                        kv_lens=lens,
                        config=base_cfg_of(name, heads),
                    )
                    torch.cuda.synchronize()
                    errs["page64"] = (
                        float("nan") if torch.isnan(got).any() else float((got.float() - q_ref64).abs().max())
                    )
                    bound = max(2 * fi_err, float(r32.abs().max()) * 2**-7)
                    row.update(
                        {
                            "splits": splits,
                            "err_vs_fp32": errs,
                            "bound": bound,
                            "ok": all(math.isfinite(e) and e <= bound for e in errs.values()),
                        }
                    )
                except Exception as exc:
                    row.update(
                        {
                            "ok": False,
                            "error": f"{type(exc).__name__}: {exc}"[:400],
                            "trace": traceback.format_exc()[-1200:],
                        }
                    )
                rows.append(row)
                log("check", json.dumps({k: v for k, v in row.items() if k != "trace"}))


def timings(H, fi, ns, names, pools, bf16_pools, timer, out, gen, heads_list, t_end) -> None:
    import torch
    from sglops_kernels.fp8_mla_decode import _triton as base
    from sglops_kernels.fp8_mla_decode import splits_for

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # the harness's table times (f) with the kernel's configuration: make that the picked one ("base")
    base.CONFIGS["sm90"].update({k: dict(v) for k, v in PICKED.items()})
    rows = out.setdefault("table", [])
    for heads in heads_list:
        for ctx, bs in CELLS:
            if time.time() > t_end:
                log("out of time budget: table stops")
                return
            before = len(rows)
            H.table(fi, ns, pools, bf16_pools, timer, out, gen, [heads], [ctx], [bs], t_end + 30)
            r = rows.pop() if len(rows) > before else {"error": "harness table skipped the cell"}
            row = {
                "heads": heads,
                "ctx": ctx,
                "bs": bs,
                "live_rows": bs * ctx,
                "c_us": r.get("c_us"),
                "e_us": r.get("e_us"),
                "us": {"base": r.get("f_us")},
                "splits": {"base": r.get("f_splits")},
            }
            if "error" in r:
                row["harness_error"] = r["error"]
            seq = torch.full((bs,), ctx, dtype=torch.int32, device="cuda")
            _, indptr, ids = fi.batch(gen, bs, H.POOL_ROWS, seq_lens=seq)
            q = torch.randn(bs, heads, H.CKV + H.KPE, generator=gen, device="cuda").to(torch.bfloat16)
            o = torch.empty(bs, heads, H.CKV, dtype=torch.bfloat16, device="cuda")
            reps = 10 if bs * ctx * (heads // 16) < (4 << 20) else 5
            for name in names:
                if name == "base" or cfg_for(name, heads) is None or time.time() > t_end + 20:
                    continue
                try:
                    splits = splits_for(bs, heads, ctx, sms, cfg_for(name, heads))
                    g = H.f_graph(shim(name), pools, q, indptr, ids, base_cfg_of(name, heads), splits, o)
                    row["us"][name] = timer.replay_us(g, reps) / H.LAYERS
                    row["splits"][name] = splits
                    del g
                except Exception as exc:
                    row.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"[:300]
            fp8 = bs * ctx * (H.CKV + H.KPE)
            row["TBps"] = {k: fp8 / v / 1e6 for k, v in row["us"].items() if v}
            row["pct_copy"] = {k: 100 * v / out["copy"]["TBps"] for k, v in row["TBps"].items()}
            rows.append(row)
            Path(out["dest"]).write_text(json.dumps(out, indent=1))
            log(
                "cell",
                json.dumps(
                    {
                        k: round(v, 2) if isinstance(v, float) else v
                        for k, v in row.items()
                        if k in ("heads", "ctx", "bs", "c_us", "e_us")
                    }
                    | {"us": {k: round(v, 1) for k, v in row["us"].items() if v}}
                ),
            )
            torch.cuda.empty_cache()


def summary(out: dict, names) -> None:
    print("\nus per layer (8 layers, L2 flushed); TB/s of FP8 read for the best variant")
    # columns as wide as the longest variant names
    w = {n: max(10, len(n) + 1) for n in names}
    print(
        "heads    ctx  bs |"
        + "".join(f"{n:>{w[n]}s}" for n in names)
        + " |     c_us     e_us | best  TB/s %copy best/c best/e"
    )
    for r in out.get("table", []):
        us = r["us"]
        cells = "".join(f"{us[n]:{w[n]}.1f}" if us.get(n) else f"{'-':>{w[n]}s}" for n in names)
        live = {k: v for k, v in us.items() if v}
        if not live:
            continue
        best = min(live, key=live.get)
        c, e = r.get("c_us") or float("nan"), r.get("e_us") or float("nan")
        print(
            f"{r['heads']:5d} {r['ctx']:6d} {r['bs']:3d} |{cells} | {c:8.1f} {e:8.1f} | {best:>9s} "
            f"{r['TBps'][best]:5.2f} {r['pct_copy'][best]:5.1f}% {live[best] / c:5.2f} {live[best] / e:5.2f}"
        )
    for c in out.get("correctness", []):
        print(
            "check",
            c["variant"],
            c["heads"],
            c["bs"],
            c["max_len"],
            "ok" if c.get("ok") else "FAIL",
            json.dumps(c.get("err_vs_fp32")),
            "fi_bf16",
            f"{c['fi_bf16_err']:.3g}",
            c.get("error", ""),
        )


def parse_selection(variants: str, heads: str) -> tuple[list[str], list[int]]:
    """The variant names and head counts of a run; a bad one ends the run in one line before any GPU work."""
    try:
        heads_list = [int(h) for h in heads.split(",")]
    except ValueError:
        raise SystemExit(f"error: --heads takes comma-separated integers, not {heads!r}") from None
    if not heads_list or any(h not in (16, 128) for h in heads_list):
        raise SystemExit(f"error: --heads takes 16 and/or 128, not {heads!r}")
    import _variants as V
    from sglops_kernels.fp8_mla_decode import _cuda

    known = list(V.VARIANTS) + [f"cu_{k}{m}" for k in _cuda.KERNELS for m in ("", "_m64")]
    names = [n for n in variants.split(",") if n]
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise SystemExit(
            f"error: unknown variant(s) {','.join(unknown) or '(none given)'}; known: {','.join(known)}"
        )
    return names, heads_list


def main() -> None:
    # no-op since v0.6: the package's .cu holds the picks alone;
    os.environ.setdefault("SGLOPS_FP8_MLA_VARIANTS", "1")
    # a cu_ variant other than the picks needs the v0.5 tree (lab/fp8_mla_decode/README.md)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument(
        "--budget", type=float, default=185.0, help="seconds for the whole run; cells are cut to fit"
    )
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated _variants.VARIANTS names")
    ap.add_argument("--heads", default="16,128")
    ap.add_argument(
        "--list", action="store_true", help="print each variant's configuration per head count; no GPU"
    )
    args = ap.parse_args()
    names, heads_list = parse_selection(args.variants, args.heads)
    if args.list:
        for n in names:
            print(n, json.dumps({h: cfg_for(n, h) for h in heads_list}))
        return
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    dest = outdir / "fp8_mla_variants.json"
    import threading

    import torch
    import triton

    H = load_harness()
    fi = H.load_fi_driver()
    out: dict = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "argv": sys.argv[1:],
        "picked": {str(k): v for k, v in PICKED.items()},
        "configs": {n: {str(h): cfg_for(n, h) for h in heads_list} for n in names},
        "dest": str(dest),
    }
    jit: dict = {}
    th = threading.Thread(target=lambda: jit.update(fi.prebuild(["fa3"])))
    th.start()
    t = time.time()
    precompile(names, heads_list)
    out["precompile_s"] = time.time() - t
    th.join()
    out["jit"] = jit
    log("precompiled in", round(out["precompile_s"], 1), "s; flashinfer jit", json.dumps(jit))
    out["copy"] = H.copy_ceiling()
    ns: dict = {"torch": torch}
    exec(compile(H.HELPERS.read_text(), str(H.HELPERS), "exec"), ns)
    if ns.get("_fused_cast_live_rows") is None:
        raise SystemExit(
            "error: sglops_kernels.gather_cast is not importable (PYTHONPATH=kernels/gather_cast)"
        )
    gen = torch.Generator(device="cuda").manual_seed(0)
    timer = H.Timer()
    try:
        correctness(H, fi, names, out, gen)
        dest.write_text(json.dumps(out, indent=1))
        pools = H.make_pools(gen)
        bf16_pools = [p.to(torch.bfloat16) for p in pools]
        timings(H, fi, ns, names, pools, bf16_pools, timer, out, gen, heads_list, T0 + args.budget - 25)
    finally:
        out["wall_s"] = time.time() - T0
        dest.write_text(json.dumps(out, indent=1))
    summary(out, names)


if __name__ == "__main__":
    main()
