"""Real vLLM release trees from PyPI (the CUDA `vllm` wheels), cached, laid out as pip installs them.

Only the Python sources and the dist-info are unpacked (a wheel is 300-450 MB, almost all of it compiled CUDA
kernels the probes never read): `<cache>/site-v2/vllm-<version>-py/vllm/...`, bytes as the wheel has them.
Read by the vLLM probes (sglops/probe/vllm_backends.py); nothing here is ever committed to this repo.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from sglops.core.wheels import cache_dir, cached_wheel

SITES = "site-v2"


def wanted(name: str) -> bool:
    """A wheel entry the probes may read: Python sources and the install metadata (its version)."""
    return name.endswith(".py") or name.split("/", 1)[0].endswith(".dist-info")


def vllm_site(version: str) -> Path:
    """A site-packages folder holding vllm VERSION's Python files as pip lays them out (cached, read-only)."""
    site = cache_dir() / SITES / f"vllm-{version}-py"
    # made under a temporary name and renamed whole: there means complete
    if site.is_dir():
        return site
    tmp = site.with_name(site.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with zipfile.ZipFile(cached_wheel("vllm", version)) as zf:
        for info in zf.infolist():
            if not info.is_dir() and wanted(info.filename):
                zf.extract(info, tmp)
    try:
        tmp.rename(site)
    # another process finished the same site first
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return site


def vllm_tree(version: str) -> Path:
    """The `vllm` package folder of that release."""
    return vllm_site(version) / "vllm"
