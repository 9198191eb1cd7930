"""The house style, enforced: `ruff check` (E501 included: 110 columns) and `ruff format --check` pass on the
whole tree, so a change that is not formatted fails the suite rather than a later reader's eyes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_is_clean(command: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"ruff {' '.join(command)}:\n{proc.stdout}{proc.stderr}"
