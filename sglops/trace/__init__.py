"""Trace analysis: stream-parse torch/SGLang Chrome traces, break GPU time down, name the bottleneck.

`analyze(paths) -> TraceAnalysis` (to_json / table / markdown / chart) is the entry point for
tasks and plays; `parse`, `breakdown`, `diagnose` and `report` are its parts.
"""

from sglops.trace.analysis import TraceAnalysis, analyze, analyze_to, expand_paths, save_report, short_kernel
from sglops.trace.parse import TraceError

__all__ = ["TraceAnalysis", "TraceError", "analyze", "analyze_to", "expand_paths", "save_report", "short_kernel"]
