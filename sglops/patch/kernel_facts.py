"""Facts about the kernels `inv build-kernel` installed on a host, for a patch's `requires`.

A patch that calls a kernel (fp8-mla-native -> fp8_mla_decode) must not go onto a host where that kernel is
missing or was built for another GPU: the patched code would fall back to the stock path (or, worse, load a
Triton cache compiled for another SM). The host's kernel record (host/kernel_build.py, installed.json) says
which arch each kernel was built for; these facts compare it with the host's GPU.
"""

from __future__ import annotations

from typing import Any

from sglops.core.remote import Remote


def same_sm(arch: str | None, gpu_sm: str | None) -> bool:
    """`sm_90a` (a build arch) and `sm90` (a GPU fact) name the same SM; `sm_120` and `sm120` too."""
    if not arch or not gpu_sm:
        return False
    return arch.replace("_", "").rstrip("a") == gpu_sm.replace("_", "").rstrip("a")


def kernel_facts(records: list[dict[str, Any]], gpu_sm: str | None) -> dict[str, Any]:
    """`kernel_<name>_arch` (what it was built for) and `kernel_<name>_for_this_gpu` (True when that is this
    host's SM) for every installed kernel; a kernel never built has neither (a `requires` on it is unmet)."""
    facts: dict[str, Any] = {}
    for rec in records:
        name = str(rec.get("name") or "")
        if not name:
            continue
        facts[f"kernel_{name}_arch"] = rec.get("arch")
        facts[f"kernel_{name}_for_this_gpu"] = same_sm(rec.get("arch"), gpu_sm)
    return facts


def installed_kernel_facts(remote: Remote, gpu_sm: str | None) -> dict[str, Any]:
    """The facts above from the host's record (one round trip)."""
    answer = remote.run_py("kernel_build", {"action": "list", "sglang_root": remote.host.sglang_root})
    return kernel_facts(list(answer.get("installed") or []), gpu_sm)
