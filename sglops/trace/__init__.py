"""Trace analysis: stream-parse torch/SGLang Chrome traces, break GPU time down, name the bottleneck.

`analyze(paths) -> TraceAnalysis` (data and to_json; its table, markdown and chart are in sglops.views.trace)
is the entry point for tasks and plays; `parse`, `breakdown` and `diagnose` are its parts.
"""

from sglops.trace.analysis import TraceAnalysis, analyze, analyze_to, expand_paths, save_report, short_kernel
from sglops.trace.parse import TraceError

__all__ = ["TraceAnalysis", "TraceError", "analyze", "analyze_to", "expand_paths", "save_report", "short_kernel"]
