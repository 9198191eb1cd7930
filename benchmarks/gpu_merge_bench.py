"""fp8_mla_decode's split merge on the GPU: a chunked merge (16 splits' rows as one tile) against the
package's serial loop, one run.

Why: a CUDA graph captured for a long context keeps dozens of splits per request whatever the live length (66
at bs 1 for a 32K context on an H200), and the GPU tier's server profile put the merge at 5.5 µs per layer
beside the kernel's 8.0 at short contexts. The package's loop issues one log-sum-exp load per split; the
candidate loads 16 splits' rows as one tile. Both run here on the same inputs (A/B in one process, CUDA graphs
of 20 launches, outputs compared), so the ratio needs no second call. Measured 2026-12-04
(benchmarks/results/fp8-mla-merge-2026-12-04/, where "chunked" is the candidate and "serial" the package): the
candidate lost where it mattered (x1.04 at 66 splits with 1 live, x1.5-1.7 at 4 splits) and won only with
every split live (x0.86), so the package kept its loop.

    # on the device machine; PYTHONPATH has kernels/fp8_mla_decode
    python3 benchmarks/gpu_merge_bench.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels" / "fp8_mla_decode"))
from sglops_kernels.fp8_mla_decode import _triton as T  # noqa: E402

# (batch, heads, splits, live splits per request): graph-shaped short contexts first, then table-like cells
CASES = [
    (1, 16, 66, 1),
    (1, 16, 66, 8),
    (1, 16, 66, 66),
    (8, 16, 33, 3),
    (16, 16, 16, 16),
    (64, 16, 4, 4),
    (1, 128, 66, 1),
    (1, 128, 66, 66),
    (16, 128, 4, 4),
]


@triton.jit(do_not_specialize=["n_splits", "heads"])
def chunked_merge(
    part_ptr,
    lse_ptr,
    out_ptr,
    heads,
    o_sb,
    o_sh,
    n_splits,
    CKV: tl.constexpr,
    SPLITS: tl.constexpr,
    CHUNK: tl.constexpr = 16,
):
    """The candidate: the package's merge with CHUNK splits' rows loaded as one [CHUNK, CKV] tile per pass."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // heads
    hh = bh % heads
    sp = tl.arange(0, SPLITS)
    lse = tl.load(lse_ptr + bh * n_splits + sp, mask=sp < n_splits, other=float("-inf"))
    mx = tl.max(lse, 0)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    total = tl.maximum(tl.sum(tl.exp2(lse - mx), 0), 1e-30)
    cv = tl.arange(0, CKV)
    ch = tl.arange(0, CHUNK)
    acc = tl.zeros([CKV], tl.float32)
    for c in range(0, n_splits, CHUNK):
        s = c + ch
        li = tl.load(lse_ptr + bh * n_splits + s, mask=s < n_splits, other=float("-inf"))
        live = li > float("-inf")
        w = tl.where(live, tl.exp2(li - mx) / total, 0.0)
        rows = tl.load(
            part_ptr + (bh * n_splits + s)[:, None] * CKV + cv[None, :], mask=live[:, None], other=0.0
        )
        acc += tl.sum(w[:, None] * rows, 0)
    tl.store(out_ptr + b * o_sb + hh * o_sh + cv, acc.to(out_ptr.dtype.element_ty))


def timed(fn, reps: int = 20, replays: int = 50) -> float:
    """µs per launch: a graph of `reps` launches replayed `replays` times between CUDA events."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / (reps * replays)


def case(batch: int, heads: int, splits: int, live: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(batch * 1000 + splits)
    part = torch.randn(batch * heads * splits * 512, device="cuda", generator=gen)
    lse = torch.full((batch * heads, splits), float("-inf"), device="cuda")
    lse[:, :live] = torch.randn(batch * heads, live, device="cuda", generator=gen) * 3
    outs = {
        k: torch.empty(batch, heads, 512, dtype=torch.bfloat16, device="cuda") for k in ("chunked", "serial")
    }
    kernels = {"chunked": chunked_merge, "serial": T._merge_kernel}

    def launch(name: str):
        out = outs[name]
        return lambda: kernels[name][(batch * heads,)](
            part,
            lse,
            out,
            heads,
            out.stride(0),
            out.stride(1),
            splits,
            CKV=512,
            SPLITS=T.MAX_SPLITS,
            num_warps=4,
        )

    us = {name: timed(launch(name)) for name in kernels}
    diff = (outs["chunked"].float() - outs["serial"].float()).abs().max().item()
    return {
        "batch": batch,
        "heads": heads,
        "splits": splits,
        "live": live,
        "chunked_us": round(us["chunked"], 2),
        "serial_us": round(us["serial"], 2),
        "ratio": round(us["chunked"] / us["serial"], 3),
        "max_abs_diff": diff,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [case(*c) for c in CASES]
    doc = {"gpu": torch.cuda.get_device_name(0), "triton": triton.__version__, "rows": rows}
    (args.out / "merge_bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(
        f"{'bs':>3} {'heads':>5} {'splits':>6} {'live':>4} | {'chunked µs':>10} {'serial µs':>9} {'ratio':>6}"
        " | max diff"
    )
    for r in rows:
        print(
            f"{r['batch']:>3} {r['heads']:>5} {r['splits']:>6} {r['live']:>4} | {r['chunked_us']:>10} "
            f"{r['serial_us']:>9} {r['ratio']:>6} | {r['max_abs_diff']:.3g}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
