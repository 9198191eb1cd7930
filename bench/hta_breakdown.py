"""A plain Holistic Trace Analysis script: the yardstick `bench_trace.py command` times `inv analyze-trace` against.

    python bench/hta_breakdown.py TRACE [--json]

What a user writes with HTA to get the breakdown `inv analyze-trace` gives: load one trace, kernel breakdown,
idle time, CPU op durations. Run it with a Python that has `holistictraceanalysis` (the `bench` extra).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout


def main(path: str, as_json: bool) -> None:
    from hta.trace_analysis import TraceAnalysis

    work = tempfile.mkdtemp(prefix="hta-breakdown-")
    try:
        local = os.path.join(work, "rank0." + ("trace.json.gz" if path.endswith(".gz") else "trace.json"))
        os.symlink(os.path.abspath(path), local)
        sink = io.StringIO()
        with redirect_stdout(sink), redirect_stderr(sink):
            ta = TraceAnalysis(trace_files={0: local}, trace_dir=work, include_last_profiler_step=True)
            try:
                _, kernels = ta.get_gpu_kernel_breakdown(visualize=False, num_kernels=15, duration_ratio=1.0)
                rows = [{"name": r["name"], "us": float(r["sum (us)"])} for _, r in kernels.iterrows()]
            except Exception as exc:  # a CPU-only trace has no kernels: HTA cannot break it down
                rows = [{"error": f"{type(exc).__name__}: {exc}"[:200]}]
            df = ta.t.get_trace(0)
            ops = df[df["cat"].isin(["cpu_op", "user_annotation"])]
            top_ops = ops.groupby("name")["dur"].sum().sort_values(ascending=False).head(15)
            names = ta.t.symbol_table.get_sym_table()
        out = {"kernels": rows, "cpu_ops": [{"name": names[int(i)] if isinstance(i, int | float) else str(i),
                                            "us": float(v)} for i, v in top_ops.items()]}
        print(json.dumps(out) if as_json else "\n".join(f"{r.get('us', '')}\t{r.get('name', r.get('error'))}"
                                                       for r in out["kernels"] + out["cpu_ops"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1], "--json" in sys.argv[2:])
