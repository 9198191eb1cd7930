"""One launch of the CUDA FP8 MLA decode kernel at a large cell, for Nsight Compute (stall reasons, pipe use).

Why: the variants that leave stages out (BENCH.md v0.3) say loads alone reach 81% of copy and the products alone
take 57% of the whole kernel's time, but not why the two overlap poorly; the hardware counters can.
Run on the device machine (repo root, `export PATH=/usr/local/cuda/bin:$PATH`):
    PYTHONPATH=kernels/fp8_mla_decode ncu --clock-control none --kernel-name regex:fp8_mla_ --launch-skip 1 \
        --launch-count 1 --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section Occupancy python3 benchmarks/gpu_fp8_mla_ncu.py [KERNEL]
It runs the kernel twice (the first launch loads the module), checks nothing, prints the time of a third.
Which line stalls (round 6 on, NOTES.md): build with source lines kept and add the SourceCounters section,
    SGLOPS_FP8_MLA_LINEINFO=1 PYTHONPATH=kernels/fp8_mla_decode ncu --clock-control none --kernel-name regex:fp8_mla_ \
        --launch-skip 1 --launch-count 1 --section WarpStateStats --section SourceCounters \
        --import-source yes -o $OUT/ncu python3 benchmarks/gpu_fp8_mla_ncu.py n32_s3_b3_1b
    ncu --import $OUT/ncu.ncu-rep --page source --csv --print-source sass > $OUT/ncu_source.csv   # not yet run here
"""

from __future__ import annotations

import os
import sys

import torch


def main() -> None:
    os.environ.setdefault("SGLOPS_FP8_MLA_VARIANTS", "1")  # no-op since v0.6: the package's .cu holds the picks alone;
    # a cu_ variant other than the picks needs the v0.5 tree (lab/fp8_mla_decode/README.md)
    from sglops_kernels.fp8_mla_decode import _cuda, splits_for

    kernel = sys.argv[1] if len(sys.argv) > 1 else _cuda.DEFAULT["sm90"][16]
    rows, bs, ctx, heads = 495_000, 64, 131_072, 16
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
    print(f"{kernel}: splits {splits}, {ms * 1e3:.0f} us, {bs * ctx * 576 / ms / 1e9:.2f} TB/s (L2 not flushed)")


if __name__ == "__main__":
    main()
