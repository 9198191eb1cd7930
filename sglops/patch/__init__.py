"""Declarative SGLang patches: spec, unified diffs, apply/revert/capture through the host journal."""
