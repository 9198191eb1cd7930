"""A plain Holistic Trace Analysis script: the yardstick
`bench_trace.py command` times `inv analyze-trace` against.

    python benchmarks/hta_breakdown.py TRACE [--json]

What a user writes with HTA to get what `inv analyze-trace` gives: load one trace; the GPU kernel breakdown
and the GPU idle time (temporal breakdown) where there are kernels; time and calls per CPU op and per
record_function range (SGLang's scheduler phases and step markers). Run it with a Python that has
`holistictraceanalysis` (the `bench` extra).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout


def breakdown(path: str) -> dict:
    from hta.trace_analysis import TraceAnalysis

    work = tempfile.mkdtemp(prefix="hta-breakdown-")
    try:
        local = os.path.join(work, "rank0." + ("trace.json.gz" if path.endswith(".gz") else "trace.json"))
        os.symlink(os.path.abspath(path), local)
        sink = io.StringIO()
        with redirect_stdout(sink), redirect_stderr(sink):
            ta = TraceAnalysis(trace_files={0: local}, trace_dir=work, include_last_profiler_step=True)
            out: dict = {}
            try:
                _, kernels = ta.get_gpu_kernel_breakdown(visualize=False, num_kernels=15, duration_ratio=1.0)
                out["kernels"] = [
                    {"name": r["name"], "us": float(r["sum (us)"])} for _, r in kernels.iterrows()
                ]
                temporal = ta.get_temporal_breakdown(visualize=False)
                out["idle_pct"] = float(temporal["idle_time_pctg"].iloc[0])
            # a CPU-only trace has no kernels: HTA has no GPU breakdown for it
            except Exception as exc:
                out["kernels_error"] = f"{type(exc).__name__}: {exc}"[:200]
            df = ta.t.get_trace(0)
            ids = ta.t.symbol_table.get_sym_id_map()
            names = ta.t.symbol_table.get_sym_table()
            for label, cat in (("cpu_ops", "cpu_op"), ("ranges", "user_annotation")):
                rows = df[df["cat"] == ids.get(cat, -2)].groupby("name")["dur"].agg(["sum", "count"])
                rows = rows.sort_values("sum", ascending=False).head(15)
                out[label] = [
                    {"name": names[int(i)], "us": float(r["sum"]), "count": int(r["count"])}
                    for i, r in rows.iterrows()
                ]
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    result = breakdown(sys.argv[1])
    if "--json" in sys.argv[2:]:
        print(json.dumps(result))
    else:
        for key, rows in result.items():
            print(key, rows if not isinstance(rows, list) else "\n  " + "\n  ".join(map(str, rows)))
