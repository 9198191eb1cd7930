"""Released wheels from PyPI, downloaded once into sglops' cache: the pristine files of a release
(capture-patch --against release diffs against them; the sandbox builds its trees from them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sglops.core.errors import SglopsError


def cache_dir() -> Path:
    path = Path(os.environ.get("SGLOPS_CACHE") or Path.home() / ".cache" / "sglops")
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_wheel(dist: str, version: str) -> Path:
    """The release's wheel from PyPI, downloaded once (`pip download --no-deps`)."""
    wheels = cache_dir() / "wheels"
    wheels.mkdir(exist_ok=True)
    stem = dist.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    if found:
        return found[0]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            f"{dist}=={version}",
            "-d",
            str(wheels),
        ],
        capture_output=True,
        text=True,
    )
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SglopsError(f"could not download {dist}=={version} from PyPI: {last}")
    return found[0]
