"""Benchmark gather_cast on a CUDA GPU against the copy ceiling and torch (see BENCH.md).

Bytes moved by the fused kernel: (1 + 2) x 576 x rows (each FP8 row read once, BF16 written
once; the 4-8 index bytes per row are not counted). Times are medians over repeats of CUDA
graph replays of K back-to-back calls on K different index sets (so neither launch gaps nor
L2 hits on a repeated set flatter small sizes); `eager_us` is triton.testing.do_bench's
median of one eager call, launch overhead included.

    PYTHONPATH=kernels/gather_cast python kernels/gather_cast/bench.py [--out DIR] [--sweep]
"""

import argparse
import json
import math
import os
import statistics
import sys

import torch
import triton
import triton.testing
from sglops_kernels.gather_cast import _triton as impl
from sglops_kernels.gather_cast import gather_cast

FP8 = torch.float8_e4m3fn
D = 576
POOL = 495_000
SIZES = [1, 64, 512, 4096, 16384, 65536, 131072, 262144, 495_000]


def graph_time_us(make_call, k: int, repeats: int = 7) -> float:
    """Median per-call time of graph replays of k calls (call i on input set i)."""
    calls = [make_call(i) for i in range(k)]
    for c in calls:
        c()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    g.replay()
    end.record()
    end.synchronize()
    once = start.elapsed_time(end)
    # about 20 ms per timing
    reps = max(1, min(200, int(20 / max(once, 1e-3))))
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(reps):
            g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (reps * k))
    del g
    return statistics.median(times)


def sets_for(nbytes: int) -> int:
    return max(2, min(64, math.ceil(512e6 / max(nbytes, 1))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--sweep", action="store_true", help="also time (rows, warps) configurations")
    a = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(0)
    res = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cc": "{}.{}".format(*torch.cuda.get_device_capability()),
        "config": dict(impl.CONFIG),
        "pool_tokens": POOL,
    }

    # 1. the ceiling: a large device-to-device copy (bytes read + bytes written)
    n = 1 << 30
    src, dst = (
        torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev),
        torch.empty(n, dtype=torch.uint8, device=dev),
    )
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    copy_bw = 2 * n / (ms * 1e-3) / 1e12
    res["copy_tb_s"] = copy_bw
    print(f"copy 1 GiB: {ms * 1e3:.0f} us -> {copy_bw:.2f} TB/s (read + write)", flush=True)
    src = dst = None

    pool = (torch.randn(POOL, 1, D, device=dev) * 0.5).to(FP8)

    # 2. NaN bits: what torch's CUDA cast writes for e4m3 NaN (0x7f, 0xff) per output, and the kernel unfixed
    nb = torch.tensor([[0x7F] * D, [0xFF] * D], dtype=torch.uint8, device=dev).view(2, 1, D)
    two = torch.tensor([0, 1], device=dev)
    nan = {}
    for label, od, sc in (
        ("bf16", torch.bfloat16, None),
        ("fp16", torch.float16, None),
        ("fp32", torch.float32, None),
        ("bf16_scaled", torch.bfloat16, 0.37),
    ):
        iv = torch.int32 if od == torch.float32 else torch.int16
        ref = nb.view(FP8)[two].to(od) if sc is None else (nb.view(FP8)[two].to(torch.float32) * sc).to(od)
        raw_k = impl.gather_cast(nb, two, od, sc, nan_bits=0)
        nan[label] = {
            "torch": [hex(int(v) & 0xFFFFFFFF) for v in ref.view(iv)[:, 0, 0].tolist()],
            "kernel_unfixed": [hex(int(v) & 0xFFFFFFFF) for v in raw_k.view(iv)[:, 0, 0].tolist()],
        }
    res["nan"] = nan
    print("NaN:", json.dumps(nan), flush=True)

    def fused(idx_sets, **kw):
        return lambda i: (
            lambda: (
                gather_cast(pool, idx_sets[i])
                if not kw
                else impl.gather_cast(pool, idx_sets[i], torch.bfloat16, None, **kw)
            )
        )

    # 3. sizes: fused vs torch gather-then-cast vs a copy of the same bytes
    rows_out = []
    for rows in SIZES:
        moved = 3 * D * rows
        k = sets_for(moved)
        if rows == POOL:
            idx_sets = [torch.arange(POOL, device=dev, dtype=torch.int32) for _ in range(k)]
        else:
            idx_sets = [torch.randperm(POOL, device=dev)[:rows].to(torch.int32) for _ in range(k)]
        t_fused = graph_time_us(fused(idx_sets), k)
        t_torch = graph_time_us(lambda i, s=idx_sets: lambda: pool[s[i]].to(torch.bfloat16), k)
        half = moved // 2
        bufs = [
            (
                torch.empty(half, dtype=torch.uint8, device=dev),
                torch.empty(half, dtype=torch.uint8, device=dev),
            )
            for _ in range(k)
        ]
        for s, _ in bufs:
            s.random_(0, 256)
        t_copy = graph_time_us(lambda i, b=bufs: lambda: b[i][1].copy_(b[i][0]), k)
        bufs = None

        def eager(j=[0], k=k, sets=idx_sets):  # noqa: B006 (a counter that cycles the index sets)
            j[0] = (j[0] + 1) % k
            return gather_cast(pool, sets[j[0]])

        t_eager = triton.testing.do_bench(eager, warmup=25, rep=100, return_mode="median") * 1e3
        bw = moved / (t_fused * 1e-6) / 1e12
        row = {
            "rows": rows,
            "sets": k,
            "fused_us": t_fused,
            "torch_gather_cast_us": t_torch,
            "same_bytes_copy_us": t_copy,
            "fused_eager_us": t_eager,
            "fused_tb_s": bw,
            "pct_of_copy_peak": 100 * bw / copy_bw,
            "speedup_vs_torch": t_torch / t_fused,
            "same_bytes_copy_tb_s": moved / (t_copy * 1e-6) / 1e12,
        }
        rows_out.append(row)
        print(
            f"rows={rows:>7} fused {t_fused:9.2f} us ({bw:.2f} TB/s, {row['pct_of_copy_peak']:.0f}% of copy) "
            f"torch {t_torch:9.2f} us (x{row['speedup_vs_torch']:.2f}) copy-same-bytes {t_copy:8.2f} us "
            f"eager {t_eager:8.2f} us",
            flush=True,
        )
    res["sizes"] = rows_out

    # 4. whole pool: torch's own cast of the pool (the FlashInfer-MLA path) vs fused over arange(pool)
    pools = [pool] + [(torch.randn(POOL, 1, D, device=dev) * 0.5).to(FP8)]
    ar = torch.arange(POOL, device=dev, dtype=torch.int32)
    t_whole_torch = graph_time_us(lambda i, p=pools: lambda: p[i].to(torch.bfloat16), 2)
    t_whole_fused = graph_time_us(lambda i, p=pools: lambda: gather_cast(p[i], ar), 2)
    res["whole_pool"] = {
        "torch_to_bf16_us": t_whole_torch,
        "fused_arange_us": t_whole_fused,
        "torch_tb_s": 3 * D * POOL / (t_whole_torch * 1e-6) / 1e12,
        "fused_tb_s": 3 * D * POOL / (t_whole_fused * 1e-6) / 1e12,
    }
    print("whole pool:", json.dumps(res["whole_pool"]), flush=True)
    pools = None

    # 5. configurations (rows per program, warps)
    if a.sweep:
        sweep = []
        for rows in (4096, 65536, POOL):
            k = sets_for(3 * D * rows)
            idx_sets = [torch.randperm(POOL, device=dev)[:rows].to(torch.int32) for _ in range(k)]
            for rpp in (1, 2, 4, 8, 16, 32):
                for warps in (1, 2, 4, 8):
                    if rpp * D // 16 < 32 * warps // 2:
                        continue
                    t = graph_time_us(fused(idx_sets, rows=rpp, warps=warps), k, repeats=5)
                    sweep.append(
                        {
                            "rows": rows,
                            "rows_per_program": rpp,
                            "warps": warps,
                            "us": t,
                            "tb_s": 3 * D * rows / (t * 1e-6) / 1e12,
                        }
                    )
            best = min((s for s in sweep if s["rows"] == rows), key=lambda s: s["us"])
            print(
                f"sweep rows={rows}: best rows/program={best['rows_per_program']} warps={best['warps']} "
                f"{best['us']:.2f} us ({best['tb_s']:.2f} TB/s)",
                flush=True,
            )
        res["sweep"] = sweep

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "bench.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print(
        "\n| rows | fused us | TB/s | % copy peak | torch gather+cast us | speedup | same-bytes copy us |"
        " eager us |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows_out:
        print(
            f"| {r['rows']} | {r['fused_us']:.2f} | {r['fused_tb_s']:.2f} | {r['pct_of_copy_peak']:.0f}% |"
            f" {r['torch_gather_cast_us']:.2f} | {r['speedup_vs_torch']:.2f}x | {r['same_bytes_copy_us']:.2f}"
            f" | {r['fused_eager_us']:.2f} |"
        )
    print(
        f"copy peak {copy_bw:.2f} TB/s; whole pool: torch .to(bf16) {t_whole_torch:.1f} us, "
        f"fused {t_whole_fused:.1f} us"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
