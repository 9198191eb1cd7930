#!/usr/bin/env python3
"""128 heads against the roof (issue 37 item 3): the
package's kernel and a BF16 GEMM of the same shape, one run.

Per cell (the record harness's layers: distinct rows, NaN elsewhere, L2 flushed before every replay of a graph
of L layers): the kernel's µs per layer, its TFLOP/s of BF16-equivalent work (2 x (576 + 512) FLOP per head
per live row) and FP8 read rate; then cuBLAS (torch.bmm, BF16 in, BF16 out) doing the same FLOPs as two
batched GEMMs per request, S = Q K^T ([heads, 576] x [576, rows]) and O = P V ([heads, rows] x [rows, 512]),
timed the same way, and one 8192^3 BF16 GEMM (the card's dense roof through wgmma). The mma.sync roof (the
instruction the kernel uses, with and without its FP8 conversions) is lab/fp8_mla_decode/micro/mma_roof.cu,
run beside this by gpu_fp8_mla_record.sh.

    python3 benchmarks/gpu_fp8_mla_roof.py --out $OUT/roof.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_fp8_mla_record import SM_SCALE, err_of, make_layer, reference, time_graph  # noqa: E402

K = 1024
FLOP_PER_HEAD_ROW = 2 * (576 + 512)


def cells() -> list[tuple[str, int, list[int]]]:
    g = torch.Generator().manual_seed(37)
    ragged = torch.randint(1, 32 * K + 1, (16,), generator=g).tolist()
    return [
        ("h128 64 x 8K", 128, [8 * K] * 64),
        ("h128 16 x U(1, 32K)", 128, ragged),
        ("h128 8 x 32K", 128, [32 * K] * 8),
        ("h64 64 x 8K", 64, [8 * K] * 64),
    ]


def gemm_same_shape(heads: int, lens: list[int], reps: int) -> dict:
    """The attention's FLOPs as cuBLAS BF16 GEMMs: per request S = Q K^T then O = P V (uniform lengths: one
    bmm each over the batch; ragged: a matmul pair per request)."""
    uniform = len(set(lens)) == 1
    n = lens[0]
    if uniform:
        bs = len(lens)
        q = torch.randn(bs, heads, 576, device="cuda", dtype=torch.bfloat16)
        kt = torch.randn(bs, 576, n, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(bs, n, 512, device="cuda", dtype=torch.bfloat16)
        s = torch.empty(bs, heads, n, device="cuda", dtype=torch.bfloat16)
        o = torch.empty(bs, heads, 512, device="cuda", dtype=torch.bfloat16)

        def fn(_):
            torch.bmm(q, kt, out=s)
            torch.bmm(s, v, out=o)
    else:
        qs = [torch.randn(heads, 576, device="cuda", dtype=torch.bfloat16) for _ in lens]
        kts = [torch.randn(576, m, device="cuda", dtype=torch.bfloat16) for m in lens]
        vs = [torch.randn(m, 512, device="cuda", dtype=torch.bfloat16) for m in lens]
        ss = [torch.empty(heads, m, device="cuda", dtype=torch.bfloat16) for m in lens]
        os_ = [torch.empty(heads, 512, device="cuda", dtype=torch.bfloat16) for _ in lens]

        def fn(_):
            for i in range(len(lens)):
                torch.mm(qs[i], kts[i], out=ss[i])
                torch.mm(ss[i], vs[i], out=os_[i])

    us = time_graph(fn, 1, reps)
    flop = FLOP_PER_HEAD_ROW * heads * sum(lens)
    return {"gemm_us": us, "gemm_tflops": flop / us * 1e-6}


def dense_roof(reps: int) -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    us = time_graph(lambda _: torch.mm(a, b, out=c), 1, reps)
    return 2 * 8192**3 / us * 1e-6


def kernel_cell(name: str, heads: int, lens: list[int], sms: int, reps: int, gen: torch.Generator) -> dict:
    """The package's kernel as a host launches it (its pick
    for this head count and batch) on the record's layers."""
    from sglops_kernels.fp8_mla_decode import _cuda

    live = sum(lens)
    layers = max(1, min(8, int(6e9 // (int(live * 1.25 + 64) * 576))))
    lay = [make_layer(lens, heads, gen) for _ in range(layers)]
    bs = len(lens)
    pick = _cuda.config_for(heads, batch=bs)["kernel"]
    cfg = _cuda.config_of(pick)
    slots = _cuda.slots_for(bs, pick, sms, heads)
    wss = [
        (torch.empty(slots * heads * 512, device="cuda"), torch.empty(slots * heads, device="cuda"))
        for _ in lay
    ]
    outs = [torch.full((bs, heads, 512), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in lay]

    def fn(i):
        L = lay[i]
        _cuda.mla_decode(
            L["q"], L["pool"], L["indptr"], L["kv_indices"], SM_SCALE, 1.0, 1, outs[i], wss[i], config=cfg
        )

    us = time_graph(fn, layers, reps)
    return {
        "cell": name,
        "heads": heads,
        "bs": bs,
        "live_rows": live,
        "layers": layers,
        "pick": pick,
        "f_us": us,
        "f_tflops": FLOP_PER_HEAD_ROW * heads * live / us * 1e-6,
        "fp8_tb_s": live * 576 / us * 1e-6,
        "f_err": err_of(outs[0], reference(lay[0])),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    t0 = time.time()
    dev = torch.cuda.get_device_properties(0)
    sms = dev.multi_processor_count
    res: dict = {"device": dev.name, "sms": sms, "dense_bf16_8192_tflops": dense_roof(args.reps), "cells": []}
    print(f"{dev.name}: cuBLAS BF16 8192^3 {res['dense_bf16_8192_tflops']:.0f} TFLOP/s", flush=True)
    gen = torch.Generator().manual_seed(2)
    for name, heads, lens in cells():
        r = kernel_cell(name, heads, lens, sms, args.reps, gen)
        torch.cuda.empty_cache()
        r.update(gemm_same_shape(heads, lens, args.reps))
        r["f_over_gemm"] = r["f_tflops"] / r["gemm_tflops"]
        torch.cuda.empty_cache()
        res["cells"].append(r)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
        args.out.write_text(json.dumps(res, indent=1))
    res["seconds"] = time.time() - t0
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
