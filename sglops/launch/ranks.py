"""What a multi-rank launch needs from the host it runs on, derived from the host's facts and the profile.

Why derived, not written into profiles: the right values depend on the host (its CPUs, its torch build), and
each one prevents a crash whose text SGLang 0.5.23 really prints on a CPU host (docs/launch.md, "Multi-rank"):
- thread binding: with more ranks than NUMA nodes and no `SGLANG_CPU_OMP_THREADS_BIND`, every scheduler
  asserts `AssertionError: SGLANG_CPU_OMP_THREADS_BIND is not set, in this case, the total number of ranks
  ...`; the value is one `|`-separated CPU group per rank of this node (SGLang indexes it by the rank's local
  device id);
- the NCCL library of a CUDA torch build: on a host without a GPU, SGLang loads it for its PyNccl communicator
  and fails with `ValueError: Expected a cuda device, but got: cpu`; a library path that cannot load makes it
  fall back to gloo (`SGLANG_NCCL_SO_PATH`).
A value the profile's `env` sets is never overridden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglops.core.errors import ConfigError
from sglops.engine import Engine
from sglops.engine import get as get_engine

# the default engine's names (tests and docs refer to them)
BIND_VAR = get_engine(None).cpu_bind_var
NCCL_VAR = get_engine(None).nccl_var
# any path that cannot load: SGLang then disables PyNccl and uses gloo
NO_NCCL = "/nonexistent/libnccl.so.2"


@dataclass(frozen=True)
class Derived:
    """One variable the launch script exports because of this host, and why."""

    name: str
    value: str
    why: str


def world_size(args: dict[str, Any]) -> int:
    """Ranks of the whole server as SGLang counts them for thread binding (dp_size * tp_size * pp_size)."""
    return int(args.get("dp_size", 1)) * int(args.get("tp_size", 1)) * int(args.get("pp_size", 1))


def local_ranks(args: dict[str, Any]) -> int:
    """Ranks that run on one node: the world split evenly over nnodes (SGLang requires it to divide)."""
    total, nodes = world_size(args), int(args.get("nnodes", 1))
    if total % nodes:
        raise ConfigError(
            f"{total} ranks (dp_size * tp_size * pp_size) do not split evenly over nnodes={nodes}"
        )
    return total // nodes


def cpu_groups(cpus: list[int], ranks: int) -> str:
    """`0-7|8-15`: the host's CPUs in `ranks` contiguous
    groups, as SGLANG_CPU_OMP_THREADS_BIND spells them."""
    if ranks < 1 or len(cpus) < ranks:
        raise ConfigError(
            f"{ranks} ranks on this node need at least {ranks} CPUs; the host lets sglops use "
            f"{len(cpus)} ({_ranges(cpus) or 'none'})"
        )
    share, extra = divmod(len(cpus), ranks)
    groups, at = [], 0
    for r in range(ranks):
        n = share + (1 if r < extra else 0)
        groups.append(_ranges(cpus[at : at + n]))
        at += n
    return "|".join(groups)


def _ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> `0-2,5`."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def on_cpu(args: dict[str, Any], host_facts: dict[str, Any], engine: Engine) -> bool:
    """Whether this launch runs on CPUs: the profile says
    so, or the engine picks its platform and sees no GPU."""
    if engine.device_flag:
        return str(args.get("device", "")) == "cpu"
    return not host_facts.get("gpus_visible")


def derived_env(
    args: dict[str, Any], env: dict[str, str], host_facts: dict[str, Any] | None, engine: Engine | None = None
) -> list[Derived]:
    """The variables this host needs for this launch that
    the profile does not set (none offline: no facts)."""
    engine = engine or get_engine(None)
    if not host_facts or not on_cpu(args, host_facts, engine) or world_size(args) <= 1:
        return []
    out: list[Derived] = []
    numa = host_facts.get("numa_nodes") or 1
    bind_var, nccl_var = engine.cpu_bind_var, engine.nccl_var
    if bind_var and bind_var not in env and world_size(args) > numa:
        ranks = local_ranks(args)
        value = cpu_groups(list(host_facts.get("cpus") or []), ranks)
        out.append(
            Derived(
                bind_var,
                value,
                f"{world_size(args)} ranks on {numa} NUMA node(s): {ranks} rank(s) on "
                f"this node, each bound to its own CPUs (unset, {engine.unbound_ranks})",
            )
        )
    if (
        nccl_var
        and nccl_var not in env
        and host_facts.get("nccl_library")
        and not host_facts.get("gpus_visible")
    ):
        out.append(
            Derived(
                nccl_var,
                NO_NCCL,
                f"the host's torch ships {host_facts['nccl_library']} but there is no "
                "GPU: the ranks talk over gloo (else 'ValueError: Expected a cuda device, but got: cpu' "
                "in pynccl)",
            )
        )
    return out
