# What is on this GPU host, in one round trip: GPUs, driver/CUDA, Python, torch, FlashInfer, SGLang, and the
# engine that serves here when it is another one (its release, tree and platform: `engine`).
# "python" and "torch" describe the Python the server runs on: the running server's interpreter (found from
# the process listening on the server port), else the venv the engine's package is installed in; only when
# neither is known, the python running this script (always reported as "host_python").
import os
import re
import shutil

from ._common import (
    container_identity,
    dist_version,
    flashinfer_info,
    parallel,
    python_info,
    server_port,
    sh,
    torch_info,
    try_find_sglang,
)
from ._engine_here import platform, serving_engine
from ._server_proc import python_env, server_process
from .server_common import read_since

GPU_FIELDS = ["index", "name", "compute_cap", "memory.total", "driver_version", "uuid"]


def gpus():
    rc, out, err = sh(["nvidia-smi", "--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"])
    if rc != 0:
        return [], (err.strip() or out.strip() or "nvidia-smi failed").splitlines()[-1]
    rows = []
    for line in out.strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        if len(vals) != len(GPU_FIELDS):
            continue
        idx, name, cc, mem, driver, uuid = vals
        rows.append(
            {
                "index": int(idx),
                "name": name,
                "compute_capability": cc,
                "sm": "sm" + cc.replace(".", ""),
                "memory_mib": int(float(mem)),
                "driver": driver,
                "uuid": uuid,
            }
        )
    return rows, None


def nvidia_smi():
    """Which nvidia-smi answered, and whether it says it is a stand-in (sglops' sandbox one is a script whose
    header reads "STAND-IN nvidia-smi"; NVIDIA's is an ELF binary): its GPU lines are then no GPU's."""
    path = shutil.which("nvidia-smi")
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return {"path": path, "standin": False, "kind": "unreadable"}
    kind = "binary" if head.startswith(b"\x7fELF") else "script" if head.startswith(b"#!") else "other"
    return {"path": path, "kind": kind, "standin": kind != "binary" and b"STAND-IN" in head}


def cuda_version():
    (rc, out, _), (rc2, out2, _) = parallel(lambda: sh(["nvidia-smi"]), lambda: sh(["nvcc", "--version"]))
    m = re.search(r"CUDA Version:\s*([\d.]+)", out) if rc == 0 else None
    m2 = re.search(r"release ([\d.]+)", out2) if rc2 == 0 else None
    return {"driver_cuda": m.group(1) if m else None, "nvcc": m2.group(1) if m2 else None}


def install_python(sglang):
    """The venv python an installed (site-packages) SGLang belongs to, or None."""
    pkg = (sglang or {}).get("package_dir") or ""
    m = re.match(r"^(.*)/lib/python[\d.]+/site-packages/sglang$", pkg)
    if not m:
        return None
    for name in ("python", "python3"):
        cand = os.path.join(m.group(1), "bin", name)
        if os.access(cand, os.X_OK):
            return cand
    return None


def sglang_python(sglang, port):
    """(python env, where it was found) of the Python SGLang runs on, or (None, None)."""
    proc = server_process(port, (sglang or {}).get("root"))
    if proc and proc.get("python"):
        env = python_env(proc["python"], proc.get("pythonpath"))
        if env.get("version"):
            return env, f"the server on port {port} (pid {proc['pid']})"
    python = install_python(sglang)
    if python:
        env = python_env(python)
        if env.get("version"):
            return env, "the venv SGLang is installed in"
    return None, None


def _serving(args):
    """(the non-default engine serving here, or None; the one line why its tree was not found)."""
    from ._common import UserError

    try:
        return serving_engine(args), None
    except (UserError, OSError, ValueError, KeyError) as exc:
        return None, str(exc)


def engine_facts(found):
    """The serving engine's own block: name, release, tree, platform (and where each was read)."""
    spec, tree = found["spec"], found["tree"]
    lines = read_since(found["log"], int(found.get("log_offset") or 0)) if found.get("log") else []
    plat, plat_from = platform(spec, tree, lines)
    return {
        "name": spec["name"],
        "title": spec["title"],
        "version": tree.get("version"),
        "version_source": tree.get("version_source"),
        "package_dir": tree["package_dir"],
        "kind": tree["kind"],
        "platform": plat,
        "platform_source": plat_from,
        "python": found.get("python"),
        "port": found["port"],
        "running": bool((found.get("proc") or {}).get("pid")),
        "source": found["source"],
    }


def main(args):
    (gpu_rows, gpu_error), cuda, (sglang, sglang_error), (rc, rg, _), (found, found_error) = parallel(
        gpus,
        cuda_version,
        lambda: try_find_sglang(args.get("sglang_root")),
        lambda: sh(["rg", "--version"]),
        lambda: _serving(args),
    )
    port, _ = server_port((sglang or {}).get("root"), args.get("port"))
    env, source = sglang_python(sglang, port)
    if found and found.get("python") and not (env and env.get("executable") == found["python"]):
        other = python_env(found["python"])
        if other.get("version"):
            env, source = (
                other,
                f"the {found['spec']['title']} server on port {found['port']} ({found['source']})",
            )
    host = python_info()
    if env:
        python = {
            "executable": env["executable"],
            "version": env["version"],
            "prefix": env.get("prefix"),
            "source": source,
        }
        torch, triton, flashinfer = env.get("torch"), env.get("triton"), env.get("flashinfer")
    else:
        python = {
            **host,
            "source": "the python running sglops' host scripts (no server or engine venv found)",
        }
        torch = torch_info()
        triton = dist_version("triton")
        flashinfer = flashinfer_info()
    return {
        "hostname": __import__("socket").gethostname(),
        "gpus": gpu_rows,
        "gpu_error": gpu_error,
        "nvidia_smi": nvidia_smi(),
        "cuda": cuda,
        "python": python,
        "host_python": host,
        "torch": torch,
        "triton": triton,
        "flashinfer": flashinfer,
        "sglang": sglang,
        "sglang_error": sglang_error,
        "engine": engine_facts(found) if found else None,
        "engine_error": found_error,
        "ripgrep": rg.split()[1] if rc == 0 and rg else None,
        "container": container_identity(),
    }
