"""Trace analysis: stream-parse torch/SGLang Chrome traces, break GPU time down, name the bottleneck.

`sglops.trace.analysis.analyze(paths) -> TraceAnalysis` (data and to_json; its table, markdown and chart are
in sglops.views.trace) is the entry point for tasks and plays; `parse`, `breakdown` and `diagnose` are its
parts. The package itself imports nothing: the task catalogue imports it, and a task that reads no trace
should not pay for the analysis modules (~40 ms).
"""
