"""GPU timing of gather-cast against the whole-pool cast it replaces (one layer's KV read).

Runs the helper exactly as the patch adds it (its lines are taken from the variant's diff), on a
CUDA device: `pool.to(bf16)` over the whole FP8 pool vs `_sglops_gather_cast` of the active rows,
for several pool sizes and batch shapes; checks the kernel-visible rows are bit-identical.

    python benchmarks/bench_patches.py [--variant sglang-0.5.23] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent


def helper_from_diff(diff: Path) -> dict:
    """Exec the block of added lines that carries the `sglops: gather-cast` marker."""
    import torch

    block, inside = [], False
    for line in diff.read_text().splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            inside = inside or "sglops: gather-cast" in line
            if inside:
                block.append(line[1:])
        elif inside:
            break
    ns: dict = {"torch": torch}
    exec(compile("\n".join(block), str(diff), "exec"), ns)
    return ns


def time_ms(fn, reps: int = 30) -> float:
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="sglang-0.5.23")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    ns = helper_from_diff(REPO / "patches" / "gather-cast" / f"{args.variant}.diff")
    dev = "cuda"
    rows = []
    for pool_rows in (262_144, 1_048_576):
        pool = torch.randint(0, 256, (pool_rows + 1, 1, 576), dtype=torch.uint8, device=dev).view(
            torch.float8_e4m3fn
        )
        for bs, ctx in ((1, 4096), (32, 2048), (64, 4096), (128, 8192)):
            n = bs * ctx
            if n > pool_rows:
                continue
            idx = torch.randperm(pool_rows, device=dev)[:n].to(torch.int32) + 1
            indptr = torch.arange(0, n + 1, ctx, device=dev, dtype=torch.int32)
            wrapper = SimpleNamespace(_use_cuda_graph=False)
            planned = ns["_sglops_compact_kv"](wrapper, idx, True)
            whole = time_ms(lambda pool=pool: pool.to(torch.bfloat16))
            gather = time_ms(lambda pool=pool, w=wrapper: ns["_sglops_gather_cast"](pool, w, torch.bfloat16))
            full = pool.to(torch.bfloat16)
            compact = ns["_sglops_gather_cast"](pool, wrapper, torch.bfloat16)
            same = all(
                torch.equal(
                    full[idx[indptr[b] : indptr[b + 1]].long()].view(torch.int16),
                    compact[planned[indptr[b] : indptr[b + 1]].long()].view(torch.int16),
                )
                for b in range(bs)
            )
            rows.append(
                {
                    "pool_rows": pool_rows,
                    "bs": bs,
                    "ctx": ctx,
                    "active_rows": n,
                    "whole_pool_cast_ms": round(whole, 4),
                    "gather_cast_ms": round(gather, 4),
                    "speedup": round(whole / gather, 2),
                    "bit_exact": same,
                    "fused_kernel": ns["_fused_gather_cast"] is not None,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        del pool
    out = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "variant": args.variant,
        "rows": rows,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0 if all(r["bit_exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
