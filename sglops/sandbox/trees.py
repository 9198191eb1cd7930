"""Real SGLang (and FlashInfer) release trees from PyPI, cached, for sandbox hosts.

`pip download --no-deps sglang==X` once; the wheel is unpacked and laid out as a git
checkout `ROOT/python/sglang/...` committed once, so versions, commits and patches can be
detected exactly as on a real GPU host. Nothing here is ever committed to this repo.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from sglops.errors import SglopsError

# Compiled extensions are useless without a GPU and bloat the tree; the Python source is what we probe and patch.
SKIP_SUFFIXES = (".so",)
GIT_ENV = {
    "GIT_AUTHOR_NAME": "sglops sandbox", "GIT_AUTHOR_EMAIL": "sandbox@sglops.invalid",
    "GIT_COMMITTER_NAME": "sglops sandbox", "GIT_COMMITTER_EMAIL": "sandbox@sglops.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


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
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", f"{dist}=={version}",
         "-d", str(wheels)],
        capture_output=True, text=True,
    )
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SglopsError(f"could not download {dist}=={version} from PyPI: {last}")
    return found[0]


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SglopsError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


def _unpack(wheel: Path, dest: Path, top: str) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if not (name.startswith(top + "/") or name.startswith(f"{top}-")) or name.endswith(SKIP_SUFFIXES):
                continue
            zf.extract(info, dest)


def sglang_template(version: str) -> Path:
    """A committed git checkout of sglang VERSION (cached): ROOT/python/sglang/..."""
    root = cache_dir() / "trees" / f"sglang-{version}"
    if (root / ".git" / "sglops-ready").exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    wheel = cached_wheel("sglang", version)
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "python").mkdir(parents=True)
    _unpack(wheel, tmp / "python", "sglang")
    for info in (tmp / "python").glob("sglang-*.dist-info"):
        shutil.rmtree(info)
    (tmp / "python" / "pyproject.toml").write_text(f'[project]\nname = "sglang"\nversion = "{version}"\n')
    (tmp / "README.md").write_text(f"sglang {version}, unpacked from the PyPI wheel for the sglops sandbox.\n")
    _git("init", "-q", "-b", "main", cwd=tmp)
    _git("add", "-A", cwd=tmp)
    _git("commit", "-q", "-m", f"sglang {version} (PyPI release)", cwd=tmp)
    _git("tag", f"v{version}", cwd=tmp)
    (tmp / ".git" / "sglops-ready").write_text(version)
    tmp.rename(root)
    return root


def make_sglang_checkout(version: str, dest: Path) -> Path:
    """A fresh git checkout of the release at DEST (a cheap local clone of the cached one)."""
    template = sglang_template(version)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git("clone", "-q", "--local", str(template), str(dest), cwd=dest.parent)
    return dest


def make_installed_sglang(version: str, site: Path) -> Path:
    """sglang laid out as an installed package (site-packages/sglang + dist-info), no git."""
    wheel = cached_wheel("sglang", version)
    site.mkdir(parents=True, exist_ok=True)
    _unpack(wheel, site, "sglang")
    return site / "sglang"


def flashinfer_site(version: str) -> Path:
    """A site-packages folder holding flashinfer-python VERSION (cached, shared read-only)."""
    site = cache_dir() / "site" / f"flashinfer-{version}"
    if (site / ".sglops-ready").exists():
        return site
    shutil.rmtree(site, ignore_errors=True)
    tmp = site.with_name(site.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _unpack(cached_wheel("flashinfer-python", version), tmp, "flashinfer")
    with zipfile.ZipFile(cached_wheel("flashinfer-python", version)) as zf:
        for info in zf.infolist():
            if info.filename.startswith("flashinfer_python-") and ".dist-info/" in info.filename:
                zf.extract(info, tmp)
    (tmp / ".sglops-ready").write_text(version)
    tmp.rename(site)
    return site
