"""GPU check of the gather-cast patch under real CUDA graphs (run on a GPU host, not in CI).

SUPERSEDED: this drives the compact-layout helpers (`_sglops_compact_kv`, `_sglops_graph_kv`,
`_sglops_gather_cast`) of commit f717254, which produced benchmarks/results/h200_gather_cast_graphs.json;
the patch now casts live rows in place (benchmarks/gpu_flashinfer_mla.py checks and times it inside
FlashInfer). To reproduce the old figures, run this file from that commit.

The helpers the patch adds are taken from the patched release file (`--helpers FILE`, written by
`python3 benchmarks/gpu_gather_cast_graphs.py --extract sglang-0.5.23 OUT.py` on the laptop, which
applies the diff to the real PyPI release). On the GPU the script drives them as SGLang's decode
graphs do: capture the per-layer gather-cast once per batch size on a fixed layout, then replay with
new batches written IN PLACE into the graph's kv_indices buffer (stale tails included). For every
replay the rows the MLA kernel would read equal the whole-pool cast's rows bit for bit, with the
fused kernel (`sglops_kernels`) and with the torch fallback. It also times graph replays of
gather-cast against a graph of the whole-pool cast `pool.to(bfloat16)` for a 495,000-token pool.

    PYTHONPATH=kernels/gather_cast python benchmarks/gpu_gather_cast_graphs.py --helpers H.py --out OUT
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace


def extract(variant: str, dest: str) -> None:
    """Laptop side: the patch's helper block from the patched real release file."""
    import ast

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_gather_cast_numeric import HELPERS, patched_text

    if "_sglops_graph_kv" not in HELPERS:
        raise SystemExit("error: the patch no longer has the compact-layout helpers; run this script from "
                         "commit f717254 (or use benchmarks/gpu_flashinfer_mla.py)")
    tree = ast.parse(patched_text(variant))
    keep = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in HELPERS)
            or (isinstance(n, ast.Try) and "sglops_kernels" in ast.unparse(n))]
    Path(dest).write_text(f"# gather-cast helpers from {variant}, patched (extracted by sglops)\nimport torch\n\n"
                          + ast.unparse(ast.Module(keep, [])) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--extract", nargs=2, metavar=("VARIANT", "DEST"))
    ap.add_argument("--helpers")
    ap.add_argument("--out", default=".")
    ap.add_argument("--pool", type=int, default=495_000)
    ap.add_argument("--ctx", type=int, default=32_768)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--replays", type=int, default=12)
    args = ap.parse_args()
    if args.extract:
        extract(*args.extract)
        return

    import torch

    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    ns_fused: dict = {"torch": torch}
    exec(compile(Path(args.helpers).read_text(), args.helpers, "exec"), ns_fused)
    results: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "pool_rows": args.pool,
                     "ctx": args.ctx, "fused_available": ns_fused["_fused_gather_cast"] is not None, "cases": []}
    ns_torch = dict(ns_fused, _fused_gather_cast=None)
    raw = [torch.randint(0, 256, (args.pool, 1, 576), device=dev, dtype=torch.uint8, generator=gen)
           for _ in range(args.layers)]
    layers = [r.view(torch.float8_e4m3fn) for r in raw]
    fake_pool = SimpleNamespace(kv_buffer=raw)
    max_bs, width = 32, args.ctx + 4

    def timed_replay(g, n=50):
        times = []
        for _ in range(n):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1000)
        return statistics.median(times)

    # the whole-pool cast, as a graph (what the stock backend does every layer)
    outs_full = [None] * args.layers
    for i, pool in enumerate(layers):  # warm-up outside the graph
        outs_full[i] = pool.to(torch.bfloat16)
    g_full = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_full):
        for i, pool in enumerate(layers):
            outs_full[i] = pool.to(torch.bfloat16)
    full_us = timed_replay(g_full) / args.layers
    results["whole_pool_cast_us_per_layer"] = full_us
    del outs_full, g_full
    torch.cuda.empty_cache()

    for label, ns in (("fused", ns_fused), ("torch", ns_torch)):
        if label == "fused" and ns["_fused_gather_cast"] is None:
            continue
        for bs in (1, 4, 8):
            backend = SimpleNamespace(cuda_graph_kv_indices=torch.zeros(max_bs * args.ctx, dtype=torch.int32, device=dev))
            graph = ns["_sglops_graph_kv"](backend, fake_pool, bs, width, True)
            case = {"impl": label, "bs": bs, "compacted": graph is not None}
            if graph is None:
                case["note"] = "graph keeps the whole-pool cast (2 x cap > pool rows)"
                results["cases"].append(case)
                continue
            wrapper = SimpleNamespace(_use_cuda_graph=True, _kv_indices_buf=graph[1], _sglops_graph=graph)
            capture_ids = torch.arange(1, bs + 1, dtype=torch.int32, device=dev)
            planned = ns["_sglops_compact_kv"](wrapper, capture_ids, True)
            wrapper._kv_indices_buf[: len(planned)].copy_(planned)
            outs = [ns["_sglops_gather_cast"](p, wrapper, torch.bfloat16) for p in layers]  # warm-up (Triton JIT)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                outs = [ns["_sglops_gather_cast"](p, wrapper, torch.bfloat16) for p in layers]
            exact = True
            stale = False
            for _ in range(args.replays):
                seq = torch.randint(1, args.ctx + 1, (bs,), device=dev, generator=gen)
                indptr = torch.zeros(bs + 1, dtype=torch.int64, device=dev)
                indptr[1:] = torch.cumsum(seq, 0)
                n = int(indptr[-1])
                ids = torch.randint(0, args.pool, (n,), device=dev, dtype=torch.int32, generator=gen)
                backend.cuda_graph_kv_indices[:n].copy_(ids)  # replay metadata: in place
                stale |= bool(backend.cuda_graph_kv_indices[n:graph[0].numel()].any())
                g.replay()
                torch.cuda.synchronize()
                for pool, out in zip(layers, outs, strict=True):
                    # the kernel reads out[arange[indptr[b]:indptr[b+1]]] = out[:n]; stock reads cast[ids]
                    want = pool[ids.long()].to(torch.bfloat16)
                    exact &= torch.equal(out[:n].view(torch.int16), want.view(torch.int16))
            case.update({"cap_rows": int(graph[0].numel()), "bit_exact": bool(exact), "stale_tail_seen": stale,
                         "replays": args.replays, "us_per_layer": timed_replay(g) / args.layers})
            case["speedup_vs_whole_pool_cast"] = full_us / case["us_per_layer"]
            results["cases"].append(case)
            print(json.dumps(case), flush=True)
            del outs, g
            torch.cuda.empty_cache()
    out = Path(args.out) / "gpu_gather_cast_graphs.json"
    out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    if not all(c.get("bit_exact", True) for c in results["cases"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
