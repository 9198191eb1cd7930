"""The `sglops` command (`pip install .`, pipx, uv tool): every task of the catalogue, as `inv` has them in a
checkout, through Invoke's own `Program`; files are found as sglops/core/paths.py says, from any folder."""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version

from invoke import Collection, Program

from sglops.cli.tasks import tasks


def program() -> Program:
    """A Program over the catalogue's tasks (the same Collection tasks.py gives `inv`)."""
    try:
        ver = version("sglops")
    except PackageNotFoundError:
        ver = "unknown"
    return Program(namespace=Collection(*tasks().values()), name="sglops", binary="sglops", version=ver)


def main() -> None:
    """The console script's entry point."""
    try:
        program().run()
    # `sglops --list | head`: the reader left; no traceback for it
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
