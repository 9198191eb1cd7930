"""Kernels built, self-tested and installed on a host (kernels/<name>/kernel.yaml)."""
