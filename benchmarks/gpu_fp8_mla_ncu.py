"""One launch of the CUDA FP8 MLA decode kernel at a large cell, for Nsight Compute (stall reasons, pipe use).

Why: the variants that leave stages out (BENCH.md v0.3) say loads alone reach 81% of copy and the products
alone take 57% of the whole kernel's time, but not why the two overlap poorly; the hardware counters can.
Run on the device machine (repo root, `export PATH=/usr/local/cuda/bin:$PATH`):
    PYTHONPATH=kernels/fp8_mla_decode ncu --clock-control none --kernel-name regex:fp8_mla_ \\
        --launch-skip 1 --launch-count 1 --section WarpStateStats --section SchedulerStats \\
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \\
        python3 benchmarks/gpu_fp8_mla_ncu.py [KERNEL]
It runs the kernel twice (the first launch loads the module), checks nothing, prints the time of a third.
Other shapes: `--heads 128 --bs 64 --ctx 8192` (the 128-head cell of record), `--bs 1 --ctx 4096` (a small
batch: the decode and its merge, `--launch-skip 4 --launch-count 2`); the pool holds max(495,000, 1.25 x the
live rows). `--small` runs the record's small cells one after another, each three times (decode + merge per
call, in launch order), for `--metrics gpu__time_duration.sum` over every launch: each kernel's own time,
caches flushed by ncu. Which line stalls (round 6 on, NOTES.md): build with source lines kept and add the
SourceCounters section,
    SGLOPS_FP8_MLA_LINEINFO=1 PYTHONPATH=kernels/fp8_mla_decode ncu --clock-control none \\
        --kernel-name regex:fp8_mla_ --launch-skip 1 --launch-count 1 --section WarpStateStats \\
        --section SourceCounters \\
        --import-source yes -o $OUT/ncu python3 benchmarks/gpu_fp8_mla_ncu.py n32_s3_b3_1b
    # not yet run here
    ncu --import $OUT/ncu.ncu-rep --page source --csv --print-source sass > $OUT/ncu_source.csv
"""

from __future__ import annotations

import argparse
import os

import torch


def main() -> None:
    # no-op since v0.6: the package's .cu holds the picks alone;
    os.environ.setdefault("SGLOPS_FP8_MLA_VARIANTS", "1")
    # a cu_ variant other than the picks needs the v0.5 tree (lab/fp8_mla_decode/README.md)
    from sglops_kernels.fp8_mla_decode import _cuda, splits_for

    ap = argparse.ArgumentParser()
    ap.add_argument("kernel", nargs="?", default=_cuda.DEFAULT["sm90"][16])
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--bs", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=131_072)
    ap.add_argument("--small", action="store_true", help="the record's small cells (bs x ctx), 3 calls each")
    a = ap.parse_args()
    shapes = SMALL if a.small else [(a.bs, a.ctx)]
    for bs, ctx in shapes:
        run(_cuda, splits_for, a.kernel, bs, ctx, a.heads)


SMALL = [(1, 4096), (1, 8192), (1, 32768), (2, 16384), (4, 4096), (4, 32768), (8, 4096), (8, 32768)]


def run(_cuda, splits_for, kernel: str, bs: int, ctx: int, heads: int) -> None:
    rows = max(495_000, int(bs * ctx * 1.25))
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = (torch.randn(rows, 1, 576, generator=gen, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    ids = torch.randint(0, rows, (bs * ctx,), generator=gen, device="cuda", dtype=torch.int32)
    indptr = torch.arange(0, bs * ctx + 1, ctx, dtype=torch.int32, device="cuda")
    q = torch.randn(bs, heads, 576, generator=gen, device="cuda").to(torch.bfloat16)
    cfg = _cuda.config_of(kernel)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = splits_for(bs, heads, ctx, sms, cfg)
    out = torch.empty(bs, heads, 512, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        _cuda.mla_decode(q, pool, indptr, ids, 0.0721, 1.0, splits, out, config=cfg)
        b.record()
        torch.cuda.synchronize()
    ms = a.elapsed_time(b)
    print(
        f"{kernel}: {heads} heads, {bs} x {ctx}: {ms * 1e3:.1f} us, {bs * ctx * 576 / ms / 1e9:.2f} TB/s, "
        f"{2 * 1088 * heads * bs * ctx / ms / 1e9:.0f} TFLOP/s (L2 not flushed)"
    )


if __name__ == "__main__":
    main()
