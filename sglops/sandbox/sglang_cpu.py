"""A real SGLang server on this CPU-only machine: its venv, a tiny offline model, the one stand-in it needs.

Built once per machine and cached (~7 GB, ~3 min of pip), reused by the tests, the demo and the benchmarks:
- a venv of its own with `sglang==0.5.23` and the dependencies its wheel pins (PyPI's CUDA torch + torchvision
  build runs with no GPU; the CPU torch build cannot import torchvision: see docs/sandbox.md);
- `sgl_kernel`: a STAND-IN for sgl-kernel's CPU extension (no wheel ships it; a source build needs ~60 C++
  files, libnuma and OpenMP and is too slow for CI), installed into that venv as a package that says what it
  is;
- a tiny random Llama with a tokenizer trained here (no model hub).
The SGLang tree a sandbox host probes and patches is this venv's own `site-packages/sglang`: a pip-installed
layout, exactly as the wheel put it there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sglops.core.errors import SglopsError
from sglops.sandbox.ports import free_port
from sglops.sandbox.trees import cache_dir

SGLANG_VERSION = "0.5.23"
# torch/torchvision: the CUDA builds sglang 0.5.23 pins;
# they run on a CPU-only machine. dill: imported at start-up.
PINS = (f"sglang=={SGLANG_VERSION}", "torch==2.14.1", "torchvision==0.29.1", "dill")
HERE = Path(__file__).resolve().parent
STANDIN_SRC = HERE / "standin_sgl_kernel" / "sgl_kernel"
MODEL_NAME = "tiny-llama-v1024"
READY = ".sglops-ready"
# The environment every real CPU server of ours runs with (SGLang's CPU engine, not the CUDA code paths).
SERVER_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
# The flags a CPU host needs: torch_native attention (the x86 default, intel_amx, needs the real CPU kernels),
# no CUDA graphs, no grammar backend (xgrammar wants a GPU build), a small KV pool.
SERVER_FLAGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--grammar-backend",
    "none",
    "--max-total-tokens",
    "8192",
    "--max-running-requests",
    "8",
    "--mem-fraction-static",
    "0.05",
)
# SGLang's scheduler otherwise polls its sockets in a busy loop, a whole core per idle server
# (docs/launch.md): on a shared 2-core host that halves what the rest can use. Outputs are the same; a request
# wakes the poll at once. The servers whose stream timing tests assert on leave it out (a burst seen with it:
# docs/launch.md's record).
IDLE_FLAGS = ("--sleep-on-idle",)
# The model every server of ours serves is a Llama: at start, SGLang's model registry need not import its ~270
# other model modules (SGLANG_DISABLED_MODEL_ARCHS, which sglang/srt/models/registry.py honours; module
# names). Start cost only (tests/suite_start_cost.py measures it): the served model and its code paths are the
# same.
KEEP_MODEL_MODULES = ("llama",)


def env_root() -> Path:
    return cache_dir() / "server-env"


def venv_dir() -> Path:
    return env_root() / f"sglang-{SGLANG_VERSION}"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def site_packages(venv: Path | None = None) -> Path:
    venv = venv or venv_dir()
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise SglopsError(f"no site-packages under {venv}/lib")
    return found[0]


def sglang_tree() -> Path:
    """The installed SGLang package folder: what a sandbox host's `sglang_root` points at."""
    return site_packages() / "sglang"


def model_dir() -> Path:
    return env_root() / "models" / MODEL_NAME


# PYTHONDONTWRITEBYTECODE (CI sets it) emptied: the steps that import from the new venv write its .pyc files
WRITE_BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}


def run_logged(
    argv: list[str], what: str, log: Path, timeout: float = 1800, env: dict[str, str] | None = None
) -> None:
    """One build step, its output appended to `log`; a failure raises with the log's last line."""
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.run(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            env={**os.environ, **env} if env else None,
        )
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise SglopsError(f"{what} failed (exit {proc.returncode}): {tail[0][:200]}; full log: {log}")


def install_standin(venv: Path) -> Path:
    """Copy the sgl_kernel stand-in into the venv, with a dist-info that names it as ours."""
    site = site_packages(venv)
    dest = site / "sgl_kernel"
    tmp = site / "sgl_kernel.sglops-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(STANDIN_SRC, tmp, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    info = site / "sglops_standin_sgl_kernel-0.0.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglops-standin-sgl-kernel\nVersion: 0.0.0\n"
        "Summary: sglops STAND-IN for sgl-kernel's CPU ops (two KV bookkeeping ops)\n"
    )
    (info / "INSTALLER").write_text("sglops\n")
    return dest


def start_env(tree: Path | None = None) -> dict[str, str]:
    """The variables that make a start cheaper (see
    KEEP_MODEL_MODULES), from the installed tree's own models."""
    models = (tree or sglang_tree()) / "srt" / "models"
    skip = sorted(
        p.stem for p in models.glob("*.py") if p.stem not in KEEP_MODEL_MODULES and not p.stem.startswith("_")
    )
    return {"SGLANG_DISABLED_MODEL_ARCHS": ",".join(skip)} if skip else {}


def not_ready() -> str | None:
    """Why the real server environment cannot be used as it is (None: the venv and the model are built)."""
    marker = venv_dir() / READY
    if not (marker.exists() and marker.read_text() == "\n".join(PINS) + "\n"):
        return (
            f"the real SGLang {SGLANG_VERSION} environment is not built in {venv_dir()} "
            "(`python -m sglops.sandbox.sglang_cpu` builds it; scripts/setup.sh runs that)"
        )
    if not (model_dir() / "sglops-model.json").exists():
        return f"the tiny model is not made in {model_dir()} (`python -m sglops.sandbox.sglang_cpu` makes it)"
    return None


def uv_command() -> list[str] | None:
    """`python -m uv` when this Python has uv (scripts/setup.sh installs it): ~4 GB of wheels downloaded and
    unpacked in parallel instead of one by one; None: pip. Set SGLOPS_INSTALLER=pip to force pip."""
    import importlib.util

    if os.environ.get("SGLOPS_INSTALLER") == "pip" or importlib.util.find_spec("uv") is None:
        return None
    return [sys.executable, "-m", "uv"]


def _install(venv: Path, log: Path) -> None:
    """PINS into the venv: the same releases either way. Bytecode: pip compiles every file; with uv,
    warm_start() writes the .pyc files of exactly the modules a server imports (the servers run with
    PYTHONDONTWRITEBYTECODE on CI: without .pyc files every start would compile sglang, torch and transformers
    again). uv's --compile-bytecode compiled all 34,313 files: 296 s of a 473 s fresh build on a busy 2-core
    machine."""
    uv = uv_command()
    if uv is None:
        run_logged(
            [str(venv_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS],
            f"pip install {' '.join(PINS)}",
            log,
        )
        return
    run_logged(
        [
            *uv,
            "pip",
            "install",
            "--python",
            str(venv_python()),
            "--cache-dir",
            str(uv_cache()),
            "--link-mode",
            "hardlink",
            "--no-progress",
            *PINS,
        ],
        f"uv pip install {' '.join(PINS)}",
        log,
    )
    shutil.rmtree(uv_cache(), ignore_errors=True)


def uv_cache() -> Path:
    """uv's cache beside the venv (one filesystem: files are hard-linked, not copied), removed once the venv
    is built, so no venv file shares an inode with a cache entry that a later install could write through."""
    return env_root() / "uv-cache"


def ensure_env(log: Path | None = None) -> Path:
    """The venv's python, building the venv first if this machine has none (idempotent, resumable)."""
    venv = venv_dir()
    marker = venv / READY
    want = "\n".join(PINS) + "\n"
    if marker.exists() and marker.read_text() == want:
        return venv_python()
    env_root().mkdir(parents=True, exist_ok=True)
    log = log or env_root() / f"build-{SGLANG_VERSION}.log"
    uv = uv_command()
    # with pip in it either way (--seed), as `python -m venv` makes it
    if not venv_python().exists():
        run_logged(
            [
                *uv,
                "venv",
                "-q",
                "--python",
                sys.executable,
                "--seed",
                "--allow-existing",
                "--cache-dir",
                str(uv_cache()),
                str(venv),
            ]
            if uv
            else [sys.executable, "-m", "venv", str(venv)],
            "making the SGLang venv",
            log,
        )
    _install(venv, log)
    install_standin(venv)
    marker.write_text(want)
    return venv_python()


def ensure_model(log: Path | None = None) -> Path:
    """The tiny model's folder, made offline in the venv if missing."""
    dest = model_dir()
    if (dest / "sglops-model.json").exists():
        return dest
    python = ensure_env(log)
    log = log or env_root() / "model.log"
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    run_logged(
        [str(python), str(HERE / "make_tiny_model.py"), str(tmp)],
        "making the tiny model",
        log,
        timeout=600,
        env=WRITE_BYTECODE,
    )
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


@dataclass
class CpuServer:
    """A real server process on loopback (`python -m sglang.launch_server`, or vLLM's API server: vllm_cpu),
    in its own process group, so its workers die with it; `grace`: how long a TERM is given before KILL."""

    port: int
    proc: subprocess.Popen
    log: Path
    grace: float = 15.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, grace: float | None = None) -> None:
        import signal

        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(self.grace if grace is None else grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass

    def __enter__(self) -> CpuServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def server_argv(
    port: int, model: Path | None = None, extra: tuple[str, ...] = (), sleep_on_idle: bool = True
) -> list[str]:
    return [
        str(venv_python()),
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model or model_dir()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *SERVER_FLAGS,
        *(IDLE_FLAGS if sleep_on_idle else ()),
        *extra,
    ]


def start_server(
    port: int,
    log: Path,
    extra: tuple[str, ...] = (),
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    sleep_on_idle: bool = True,
) -> CpuServer:
    """Start a real server directly (benchmarks, fixtures); `inv restart` goes through the rendered script
    instead. sleep_on_idle=False: SGLang's busy-polling scheduler, for figures of stream timing
    (IDLE_FLAGS)."""
    import urllib.request

    ensure_model()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            server_argv(port, extra=extra, sleep_on_idle=sleep_on_idle),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **SERVER_ENV, **start_env(), **(env or {})},
            start_new_session=True,
        )
    server = CpuServer(port, proc, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SglopsError(f"SGLang server exited ({proc.returncode}) before /health; log: {log}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.5)
    server.stop()
    raise SglopsError(f"SGLang server not healthy within {timeout:g} s; log: {log}")


def warm_start(log: Path) -> None:
    """One start of the server with bytecode writing on, stopped once healthy: the launcher, scheduler and
    detokenizer write the .pyc files of every module a start imports (a few thousand of the venv's ~34,000),
    so a later start with PYTHONDONTWRITEBYTECODE still finds them; and the page cache is warm for the first
    test."""
    start_server(free_port(), log, timeout=900, env=WRITE_BYTECODE).stop()


def _built() -> bool:
    marker = venv_dir() / READY
    return marker.exists() and marker.read_text() == "\n".join(PINS) + "\n"


# python -m sglops.sandbox.sglang_cpu: build the venv and the model, print where
if __name__ == "__main__":
    # each phase's seconds to stderr: scripts/setup.sh shows them in the CI log
    try:
        fresh = not _built()
        t0 = time.monotonic()
        print(ensure_env())
        t1 = time.monotonic()
        print(ensure_model())
        t2 = time.monotonic()
        # a venv built just now has no .pyc files (uv compiles none here): one start writes them
        if fresh:
            try:
                warm_start(env_root() / "warm-start.log")
            # the environment is built all the same; the tests' starts will say more
            except SglopsError as exc:
                print(
                    f"sglang_cpu: the first start failed ({exc}); the environment is built", file=sys.stderr
                )
        print(
            f"sglang_cpu: took venv + packages {t1 - t0:.0f} s, tiny model {t2 - t1:.0f} s, first start "
            f"{time.monotonic() - t2:.0f} s" + ("" if fresh else " (none: built before)"),
            file=sys.stderr,
        )
    except (SglopsError, OSError, subprocess.SubprocessError) as exc:
        print(f"sglang_cpu: {exc}", file=sys.stderr)
        sys.exit(1)
