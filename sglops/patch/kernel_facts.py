"""Facts about the kernels `inv build-kernel` installed on a host, for a patch's `requires`.

A patch that calls a kernel (fp8-mla-native -> fp8_mla_decode) must not go onto a host where that kernel is
missing or was built for another GPU: the patched code would fall back to the stock path (or, worse, load a
Triton cache compiled for another SM). The host's kernel record (host/kernel_build.py, installed.json) says
which arch each kernel was built for; these facts compare it with the host's GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


# kernels an earlier step of a play's dry run would build (nothing is installed yet, so the record cannot say)
_PLANNED: ContextVar[tuple[dict[str, Any], ...]] = ContextVar("sglops_planned_kernels", default=())


def planned_kernels(dry_run: bool, records: dict[str, dict]) -> list[dict[str, Any]]:
    """Kernels the earlier steps of this play's dry run would build (`records`: the play's step records)."""
    if not dry_run:
        return []
    return [
        {"name": r["result"]["kernel"], "arch": r["result"].get("arch")}
        for r in records.values()
        if r.get("do") == "build-kernel" and (r.get("result") or {}).get("status") == "would-build"
    ]


@contextmanager
def planning(kernels: list[dict[str, Any]]) -> Iterator[None]:
    """Within this block, requirements on those kernels
    are judged as if they were built (a dry run's plan)."""
    token = _PLANNED.set(tuple(kernels))
    try:
        yield
    finally:
        _PLANNED.reset(token)


def installed_kernel_facts(remote: Remote, gpu_sm: str | None) -> dict[str, Any]:
    """The facts above from the host's record (one round trip), with the kernels a dry run plans to build."""
    answer = remote.run_py("kernel_build", {"action": "list", "sglang_root": remote.host.sglang_root})
    return kernel_facts([*(answer.get("installed") or []), *_PLANNED.get()], gpu_sm)
