# sglops: include _common
# What is on this GPU host, in one round trip: GPUs, driver/CUDA, Python, torch, FlashInfer, SGLang.
import re

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
        rows.append({"index": int(idx), "name": name, "compute_capability": cc,
                     "sm": "sm" + cc.replace(".", ""), "memory_mib": int(float(mem)),
                     "driver": driver, "uuid": uuid})
    return rows, None


def cuda_version():
    (rc, out, _), (rc2, out2, _) = parallel(lambda: sh(["nvidia-smi"]), lambda: sh(["nvcc", "--version"]))
    m = re.search(r"CUDA Version:\s*([\d.]+)", out) if rc == 0 else None
    m2 = re.search(r"release ([\d.]+)", out2) if rc2 == 0 else None
    return {"driver_cuda": m.group(1) if m else None, "nvcc": m2.group(1) if m2 else None}


def main(args):
    (gpu_rows, gpu_error), cuda, (sglang, sglang_error), (rc, rg, _) = parallel(
        gpus, cuda_version, lambda: try_find_sglang(args.get("sglang_root")), lambda: sh(["rg", "--version"]))
    torch = dist_version("torch")
    if torch and torch.get("version") and "+cu" in torch["version"]:
        torch["cuda"] = torch["version"].split("+cu")[1]
    return {
        "hostname": __import__("socket").gethostname(),
        "gpus": gpu_rows,
        "gpu_error": gpu_error,
        "cuda": cuda,
        "python": python_info(),
        "torch": torch,
        "triton": dist_version("triton"),
        "flashinfer": dist_version("flashinfer-python") or dist_version("flashinfer"),
        "sglang": sglang,
        "sglang_error": sglang_error,
        "ripgrep": rg.split()[1] if rc == 0 and rg else None,
        "container": container_identity(),
    }
