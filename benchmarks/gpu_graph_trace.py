"""Make a real torch-profiler trace of an MLA-style decode step replayed from a CUDA graph (GPU only).

SGLang decodes under CUDA graphs; a replay's kernels carry no aten ops of their own (they hang off the
cudaGraphLaunch call), which is the case the trace analyser must attribute honestly. Same step shape
as ../shared/tools/make_decode_trace.py's "fullcast" variant (the whole FP8 pool cast every layer),
captured once, replayed STEPS times under torch.profiler; writes the gzipped Chrome trace and torch's
own key_averages top-25 by device time beside it.

    LAYERS=16 STEPS=3 python benchmarks/gpu_graph_trace.py OUT_DIR
"""

from __future__ import annotations

import gzip
import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    layers, pool_rows, ctx = int(os.environ.get("LAYERS", 16)), int(os.environ.get("POOL", 495_000)), 4096
    d, heads, hid = 576, 16, 6144
    dev = "cuda"
    torch.manual_seed(0)
    pool = [(torch.randn(pool_rows, 1, d, device=dev) * 0.5).to(torch.float8_e4m3fn) for _ in range(layers)]
    kv_idx = torch.randperm(pool_rows, device=dev)[:ctx].sort().values
    w_q = torch.randn(hid, heads * d, device=dev, dtype=torch.bfloat16) * 0.01
    w_o = torch.randn(heads * 512, hid, device=dev, dtype=torch.bfloat16) * 0.01
    x0 = torch.randn(1, hid, device=dev, dtype=torch.bfloat16)

    def step() -> torch.Tensor:
        x = x0
        for layer in range(layers):
            q = (x @ w_q).view(heads, d)
            # the whole-pool cast, every layer
            kv = pool[layer].to(torch.bfloat16)[kv_idx, 0]
            s = (q @ kv.t()) * (d**-0.5)
            o = (torch.softmax(s.float(), dim=-1).to(torch.bfloat16) @ kv[:, :512]).reshape(1, heads * 512)
            x = x + o @ w_o
        return x

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(10):
        graph.replay()
    b.record()
    torch.cuda.synchronize()
    ms = a.elapsed_time(b) / 10

    steps = int(os.environ.get("STEPS", 3))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(steps):
            # the span SGLang (>= 0.5.15) puts around a decode step
            with record_function("step[DECODE bs=1]"):
                graph.replay()
            torch.cuda.synchronize()
    path = os.path.join(out, "h200_graph_fullcast.trace.json")
    prof.export_chrome_trace(path)
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb", compresslevel=9) as g:
        g.write(f.read())
    os.remove(path)
    rows = []
    for e in prof.key_averages():
        dt = getattr(e, "device_time_total", None)
        rows.append(
            {
                "key": e.key,
                "count": e.count,
                "device_time_total_us": dt if dt is not None else e.cuda_time_total,
            }
        )
    rows.sort(key=lambda r: -r["device_time_total_us"])
    doc = {
        "made_with": f"benchmarks/gpu_graph_trace.py, torch.profiler on one {torch.cuda.get_device_name()}, "
        f"torch {torch.__version__}; decode step captured in a CUDA graph, replays profiled",
        "variant": "fullcast under a CUDA graph",
        "layers": layers,
        "pool_tokens": pool_rows,
        "active_tokens": ctx,
        "profiled_steps": steps,
        "ms_per_step_cuda_events": round(ms, 3),
        "torch_key_averages_top_by_device_time_us": rows[:25],
    }
    with open(os.path.join(out, "h200_graph_fullcast.torch_totals.json"), "w") as fh:
        json.dump(doc, fh, indent=1)
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=15))
    print(f"{ms:.3f} ms per replayed step; trace {os.path.getsize(path + '.gz')} bytes")


if __name__ == "__main__":
    main()
