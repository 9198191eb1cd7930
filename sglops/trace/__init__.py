"""Trace analysis: stream-parse torch/SGLang Chrome traces, break GPU time down, name the bottleneck.

`analyze(paths) -> TraceAnalysis` (data and to_json; its table, markdown and chart are in sglops.views.trace)
is the entry point for tasks and plays; `parse`, `breakdown` and `diagnose` are its parts. The names load on
first use (PEP 562): the task catalogue imports this package, and a task that reads no trace should not pay for
the analysis modules (~40 ms).
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = {"TraceAnalysis": "analysis", "analyze": "analysis", "analyze_to": "analysis", "expand_paths": "analysis",
         "save_report": "analysis", "short_kernel": "analysis", "TraceError": "parse"}

__all__ = ["TraceAnalysis", "TraceError", "analyze", "analyze_to", "expand_paths", "save_report", "short_kernel"]


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module 'sglops.trace' has no attribute {name!r}")
    return getattr(importlib.import_module(f"sglops.trace.{_FROM[name]}"), name)
