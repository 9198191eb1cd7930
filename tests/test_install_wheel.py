"""The `sglops` command as a user installs it: the wheel built from this tree, installed into a fresh venv,
run from a folder outside the checkout (the shipped playbooks, profiles, plays and patches come from the
package; the user's own from $SGLOPS_HOME, sglops/core/paths.py).

The venv sees the running interpreter's packages through a .pth line (what `--system-site-packages` gives,
also when the suite itself runs from a venv), so the install needs no network; the wheel is installed with
--no-deps.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# what the wheel is built from (a copy, so the checkout gets no build/ or egg-info)
SOURCES = (
    "sglops",
    "playbooks",
    "patches",
    "kernels",
    "templates",
    "pyproject.toml",
    "setup.py",
    "README.md",
)


def _run(argv: list, cwd: Path, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in SOURCES:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(
            REPO / name,
            src / name,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if (REPO / name).is_dir() else {}),
        )
    # the setuptools at hand when there is one (no download);
    # else pip fetches it (a fresh venv of Python 3.12+)
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    t0 = time.monotonic()
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", tmp / "dist", src],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp / "dist").glob("sglops-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=60)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    parents = [*site.getsitepackages(), sysconfig.get_path("purelib")]
    (purelib / "outer.pth").write_text("\n".join(dict.fromkeys(parents)) + "\n")
    # --ignore-installed: the outer interpreter's own sglops
    # (an editable checkout) is visible through the .pth
    inst = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            venv / "bin" / "python",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            wheel,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert inst.returncode == 0, inst.stderr[-2000:]
    took = time.monotonic() - t0
    # not the checkout, no playbooks/ of its own
    outside = tmp / "elsewhere"
    outside.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONPATH",
            "SGLOPS_INVENTORY",
            "SGLOPS_PROFILES",
            "SGLOPS_PATCHES",
            "SGLOPS_KERNELS",
            "SGLOPS_ARTIFACTS",
        )
    }
    env["SGLOPS_HOME"] = str(tmp / "home")
    return {
        "wheel": wheel,
        "bin": venv / "bin" / "sglops",
        "cwd": outside,
        "env": env,
        "tmp": tmp,
        "build_s": took,
    }


def test_wheel_ships_the_defaults(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for shipped in (
        "sglops/defaults/playbooks/hosts.yaml",
        "sglops/defaults/playbooks/probes.yaml",
        "sglops/defaults/playbooks/profiles/sandbox.yaml",
        "sglops/defaults/playbooks/fp8-kv-decode.yaml",
        "sglops/defaults/patches/gather-cast/patch.yaml",
        "sglops/defaults/kernels/gather_cast/kernel.yaml",
        "sglops/defaults/templates/sglang.sh.j2",
        "sglops/host/facts.py",
        "sglops/sandbox/bin/nvidia-smi",
    ):
        assert shipped in names, shipped
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "sglops = sglops.cli.program:main" in zipfile.ZipFile(installed["wheel"]).read(entry).decode()
    assert not any("__pycache__" in n or n.startswith(("tests/", "docs/")) for n in names)
    assert installed["wheel"].stat().st_size < 2_000_000


def test_list_from_outside_the_checkout(installed):
    t0 = time.monotonic()
    out = _run([installed["bin"], "--list"], installed["cwd"], installed["env"])
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    from sglops.ops import OPS
    from sglops.play.ops import OPS as PLAY_OPS

    listed = {
        line.split()[0]
        for line in out.stdout.splitlines()
        if line.startswith("  ") and line.split() and not line.startswith("   ")
    }
    assert {op.name for op in [*OPS, *PLAY_OPS]} <= listed, "the same catalogue as inv --list"
    assert took < 20, f"sglops --list took {took:.1f} s"
    ver = _run([installed["bin"], "--version"], installed["cwd"], installed["env"])
    assert "0.1.0" in ver.stdout


def test_runs_the_installed_copy(installed):
    code = (
        "import sglops, sglops.core.paths as p; print(sglops.__file__); print(p.SHIPPED);"
        " print(p.IN_CHECKOUT)"
    )
    out = _run([installed["bin"].parent / "python", "-c", code], installed["cwd"], installed["env"])
    where, shipped, in_checkout = out.stdout.split()
    assert str(installed["tmp"] / "venv") in where and str(REPO) not in where
    assert shipped.endswith("sglops/defaults") and in_checkout == "False"


def test_facts_local(installed):
    out = _run([installed["bin"], "facts", "--host", "local", "--json"], installed["cwd"], installed["env"])
    assert out.returncode == 0, out.stderr
    assert '"python"' in out.stdout


def test_user_files_come_before_the_shipped_ones(installed):
    """A profile in $SGLOPS_HOME is found by name; the current folder's inventory before the shipped one."""
    home = Path(installed["env"]["SGLOPS_HOME"])
    (home / "playbooks" / "profiles").mkdir(parents=True, exist_ok=True)
    shipped = (REPO / "playbooks" / "profiles" / "sandbox.yaml").read_text()
    (home / "playbooks" / "profiles" / "mine-only.yaml").write_text(shipped)
    shutil.copytree(REPO / "patches" / "gather-cast", home / "patches" / "my-fix", dirs_exist_ok=True)
    code = (
        "from sglops.launch.profiles import list_profiles; from sglops.core.hosts import inventory_path; "
        "from sglops.patch.spec import available, load; ps = list_profiles(); "
        "print('mine-only' in ps, 'sandbox' in ps, inventory_path()); print(*available()); "
        "print(load('my-fix').variants[0].diff)"
    )
    cwd = installed["cwd"]
    (cwd / "playbooks").mkdir(exist_ok=True)
    (cwd / "playbooks" / "hosts.yaml").write_text("hosts: {}\n")
    try:
        out = _run([installed["bin"].parent / "python", "-c", code], cwd, installed["env"])
    finally:
        shutil.rmtree(cwd / "playbooks")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["True", "True", str(cwd / "playbooks" / "hosts.yaml")]
    assert lines[1].split() == [
        "fp8-kv-direct",
        "fp8-mla-native",
        "gather-cast",
        "my-fix",
    ], "every patch, once"
    assert lines[2].startswith(str(home / "patches" / "my-fix"))
    bad = _run([installed["bin"], "render", "no-such-profile", "--host", "local"], cwd, installed["env"])
    assert bad.returncode == 2 and "mine-only" in bad.stderr + bad.stdout


def test_sandbox_probe_from_outside(installed):
    env, cwd = dict(installed["env"]), installed["cwd"]
    base = installed["tmp"] / "sandbox"
    up = _run([installed["bin"], "sandbox", "up", "--hosts", "1", "--base", base], cwd, env, timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        env["SGLOPS_INVENTORY"] = str(base / "hosts.yaml")
        out = _run(
            [installed["bin"], "probe-backends", "--host", "sandbox-1", "--json"], cwd, env, timeout=120
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert "flashinfer_mla" in out.stdout
        runs = _run([installed["bin"], "runs", "--json"], cwd, env)
        assert runs.returncode == 0, runs.stderr
        assert (Path(env["SGLOPS_HOME"]) / "artifacts").is_dir(), (
            "records go to the user's folder, not the package"
        )
    finally:
        _run([installed["bin"], "sandbox", "down", "--base", base], cwd, env)


def _interpreters() -> list[str]:
    """The kinds of Python this machine has: the one running the suite's base (pyenv, a venv's base) and
    Debian's own /usr/bin/python3 (externally managed, PEP 668), when each is >= 3.11."""
    found = {}
    for p in (shutil.which("python3"), getattr(sys, "_base_executable", None), "/usr/bin/python3"):
        if p and os.path.exists(p):
            r = subprocess.run(
                [
                    p,
                    "-c",
                    (
                        "import sys, os; print(os.path.realpath(sys.executable)); "
                        "sys.exit(0 if sys.version_info >= (3, 11) else 1)"
                    ),
                ],
                capture_output=True,
                text=True,
            )
            if r.returncode == 0:
                found.setdefault(r.stdout.strip(), p)
    return sorted(found.values())


@pytest.mark.parametrize("python", _interpreters())
def test_setup_makes_the_projects_own_venv(python, installed, tmp_path):
    """scripts/python.sh's make_venv (what setup.sh runs): .venv in the checkout from whatever Python is
    there, that Python itself left as it was; then `.venv/bin/sglops` works as the README prints it."""
    checkout = tmp_path / "clone"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "python.sh", checkout / "scripts")
    listing = [
        python,
        "-c",
        (
            "import os, sysconfig; p = sysconfig.get_path('purelib'); "
            "print(sorted(os.listdir(p)) if os.path.isdir(p) else [])"
        ),
    ]
    before = subprocess.run(listing, capture_output=True, text=True).stdout
    env = {**installed["env"], "SGLOPS_PYTHON": python}
    made = _run(["bash", "-c", ". scripts/python.sh && make_venv && echo PY=$PY"], checkout, env, timeout=120)
    assert made.returncode == 0, made.stderr
    assert "PY=.venv/bin/python" in made.stdout and ".venv made from" in made.stderr
    py = checkout / ".venv" / "bin" / "python"
    where = _run(
        [py, "-c", "import sys, os; print(sys.prefix); print(os.path.realpath(sys._base_executable))"],
        checkout,
        env,
    )
    prefix, base = where.stdout.split()
    # a pyenv shim execs the real one
    real = subprocess.run(
        [python, "-c", "import os, sys; print(os.path.realpath(sys.executable))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(prefix) == checkout / ".venv" and base == real
    again = _run(["bash", "-c", ". scripts/python.sh && make_venv"], checkout, env)
    assert again.returncode == 0 and ".venv made" not in again.stderr, "a second set-up keeps the venv"
    same_abi = _run(
        [py, "-c", "import sys; print(sys.version_info[:2])"], checkout, env
    ).stdout.strip() == str(tuple(sys.version_info[:2]))
    # Debian's (PEP 668): the dependencies from the running
    # interpreter (no network), the wheel itself into .venv
    if same_abi and python == "/usr/bin/python3":
        purelib = _run(
            [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], checkout, env
        ).stdout
        Path(purelib.strip(), "outer.pth").write_text(
            "\n".join(dict.fromkeys([*site.getsitepackages(), sysconfig.get_path("purelib")])) + "\n"
        )
        inst = subprocess.run(
            [
                py,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-index",
                "--ignore-installed",
                installed["wheel"],
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=checkout,
            env={k: v for k, v in env.items() if k != "PYTHONPATH"},
        )
        assert inst.returncode == 0, inst.stderr[-2000:]
        out = _run(
            [checkout / ".venv" / "bin" / "sglops", "facts", "--host", "local", "--json"],
            installed["cwd"],
            env,
        )
        assert out.returncode == 0, out.stderr[-2000:]
    after = subprocess.run(listing, capture_output=True, text=True).stdout
    assert after == before, "set-up installed into the machine's own Python"


def test_setup_refuses_an_old_python(tmp_path):
    checkout = tmp_path / "clone"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "python.sh", checkout / "scripts")
    old = tmp_path / "python3.8"
    # answers every version check "too old"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    r = _run(
        ["bash", "-c", ". scripts/python.sh && make_venv"],
        checkout,
        {**os.environ, "SGLOPS_PYTHON": str(old)},
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "Python >= 3.11" in r.stderr
    assert not (checkout / ".venv").exists()
