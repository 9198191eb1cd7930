"""Where this checkout lives (REPO_ROOT): playbooks/, patches/, kernels/, templates/ are read relative to it."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
