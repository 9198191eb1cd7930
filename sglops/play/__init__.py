"""Plays: a YAML investigation of steps run per host, their loader, runner and CLI glue; the demo."""
