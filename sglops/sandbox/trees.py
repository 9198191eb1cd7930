"""Real SGLang (and FlashInfer) release trees from PyPI, cached, for sandbox hosts.

`pip download --no-deps sglang==X` once; every file of the wheel is unpacked byte for byte
(compiled extensions included) and nothing is added, so versions are read from what a real
host has (the wheel's own `sglang/_version.py`, its dist-info METADATA, a release tag), never
from a helper file only the sandbox writes. Two layouts:

- installed (`make_installed_sglang`): the wheel unpacked into a site-packages folder, as pip
  lays it out (pip also writes INSTALLER/REQUESTED into the dist-info and compiles .pyc files;
  sglops reads neither);
- a checkout (`sglang_template`, `make_sglang_checkout`): what `git clone` of SGLang gives,
  `ROOT/python/sglang/...`, as far as a wheel can tell it: the wheel's files except its
  `*.dist-info/` (install metadata that pip writes into site-packages; no source tree has one)
  under `ROOT/python/`, committed once and tagged `v<version>`, as SGLang tags its releases.
  A real checkout also has python/pyproject.toml, docs and tests, which no wheel carries: the
  sandbox has none of them rather than made-up ones.

Cached under `<cache>/trees-v2` and `<cache>/site-v2` (v1 added a pyproject.toml and a README
and dropped `.so` files). Nothing here is ever committed to this repo.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from sglops.core.errors import SglopsError
from sglops.core.wheels import cache_dir, cached_wheel

TREES = "trees-v2"
SITES = "site-v2"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "sglops sandbox",
    "GIT_AUTHOR_EMAIL": "sandbox@sglops.invalid",
    "GIT_COMMITTER_NAME": "sglops sandbox",
    "GIT_COMMITTER_EMAIL": "sandbox@sglops.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def is_install_metadata(name: str) -> bool:
    """A wheel entry under `<dist>-<version>.dist-info/`: written to site-packages, absent from a checkout."""
    return name.split("/", 1)[0].endswith(".dist-info")


def wheel_files(wheel: Path) -> dict[str, int]:
    """Every file the wheel holds (its zip listing, folders left out) and its size in bytes."""
    with zipfile.ZipFile(wheel) as zf:
        return {i.filename: i.file_size for i in zf.infolist() if not i.is_dir()}


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SglopsError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


def _unpack(wheel: Path, dest: Path, *, with_metadata: bool = True) -> None:
    """Every file of the wheel under DEST, bytes as they are; executable bits kept, as pip keeps them."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or (not with_metadata and is_install_metadata(info.filename)):
                continue
            path = Path(zf.extract(info, dest))
            if (info.external_attr >> 16) & 0o111:
                path.chmod(path.stat().st_mode | 0o111)


def sglang_template(version: str) -> Path:
    """A committed git checkout of sglang VERSION, tagged v<VERSION> (cached): ROOT/python/sglang/..."""
    root = cache_dir() / TREES / f"sglang-{version}"
    if (root / ".git" / "sglops-ready").exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    wheel = cached_wheel("sglang", version)
    tmp = root.with_name(root.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "python").mkdir(parents=True)
    _unpack(wheel, tmp / "python", with_metadata=False)
    _git("init", "-q", "-b", "main", cwd=tmp)
    _git("add", "-A", cwd=tmp)
    _git("commit", "-q", "-m", f"sglang {version} (PyPI release)", cwd=tmp)
    _git("tag", f"v{version}", cwd=tmp)
    (tmp / ".git" / "sglops-ready").write_text(version)
    try:
        tmp.rename(root)
    # another process finished the same template first
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def make_sglang_checkout(version: str, dest: Path) -> Path:
    """A fresh git checkout of the release at DEST (a cheap local clone of the cached one)."""
    template = sglang_template(version)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git("clone", "-q", "--local", str(template), str(dest), cwd=dest.parent)
    # git's untracked cache: `git status` (the tests' "nothing written" check) walks 5,771 files' folders for
    # new files in 0.39 s without it, 0.02 s with it; the
    # suite ran ~900 of them. What status reports is the same.
    _git("config", "core.untrackedCache", "true", cwd=dest)
    return dest


def make_installed_sglang(version: str, site: Path) -> Path:
    """sglang laid out as an installed package (site-packages/sglang + its dist-info), no git."""
    wheel = cached_wheel("sglang", version)
    site.mkdir(parents=True, exist_ok=True)
    _unpack(wheel, site)
    return site / "sglang"


def flashinfer_site(version: str) -> Path:
    """A site-packages folder holding flashinfer-python VERSION (cached, shared read-only)."""
    site = cache_dir() / SITES / f"flashinfer-{version}"
    # made under a temporary name and renamed whole: there means complete
    if site.is_dir():
        return site
    tmp = site.with_name(site.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _unpack(cached_wheel("flashinfer-python", version), tmp)
    try:
        tmp.rename(site)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return site


def sglang_site(version: str) -> Path:
    """A site-packages folder holding sglang VERSION as pip installs it (cached, shared read-only): the
    release tree for scans that need no git (benchmarks/attention_path_table.py reads 13 releases this
    way)."""
    site = cache_dir() / SITES / f"sglang-{version}"
    # made under a temporary name and renamed whole: there means complete
    if site.is_dir():
        return site
    tmp = site.with_name(site.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    make_installed_sglang(version, tmp)
    try:
        tmp.rename(site)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return site
