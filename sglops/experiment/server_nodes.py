"""The server an experiment (ab, sweep) drives: one host, or every node of one server over several hosts.

Why one object: an experiment changes a server, not a host. On a server over several nodes every round must
restart every node together (a node alone is no server), a patch goes on every node or none, the ledger is
checked on each, the journal that says what to restore is written on each (naming every node), and the restore
covers every node. The experiment's code says `nodes.restart(...)` once and stays the same for one host or
eight; only node 0 serves HTTP, so benches and profiles go to `nodes.lead`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglops.core.errors import ConfigError, SglopsError
from sglops.core.remote import Remote
from sglops.experiment.ab_plan import Found
from sglops.launch import server as launch
from sglops.launch.results import RestartResult


def where(host: str, nodes: list[dict]) -> str:
    """What an experiment ran on, for its title: the host, or every node of the server with its rank."""
    if not nodes:
        return host
    return "the server over nodes " + ", ".join(
        f"{n.get('host')} (node_rank {n.get('node_rank')})" for n in nodes
    )


class NodesDiffer(ConfigError):
    """The nodes of one server were found in different states: an experiment cannot say what to restore."""


class ServerNodes:
    """One host (`ServerNodes([remote])`) or the nodes of one server, node 0 first."""

    def __init__(self, remotes: list[Remote]) -> None:
        if not remotes:
            raise ConfigError("an experiment needs a host")
        self.remotes = (
            sorted(remotes, key=lambda r: r.host.node_rank or 0) if len(remotes) > 1 else list(remotes)
        )
        self.found_by_node: dict[str, Found] = {}

    @property
    def lead(self) -> Remote:
        """Node 0: the one that serves HTTP (benches, profiles, /server_info)."""
        return self.remotes[0]

    @property
    def several(self) -> bool:
        return len(self.remotes) > 1

    @property
    def name(self) -> str:
        return self.lead.name

    def names(self) -> list[str]:
        return [r.name for r in self.remotes]

    def describe(self) -> list[dict]:
        """Every node as the journal and the record name it."""
        return [{"host": r.name, "node_rank": r.host.node_rank} for r in self.remotes]

    # -- reading -------------------------------------------------------------------------------------
    def found(self, found_of: Callable[[Remote], Found]) -> Found:
        """The server as found on every node; nodes that disagree (one running, another not; other patches)
        are refused with each node's state, before anything changes."""
        self.found_by_node = {r.name: found_of(r) for r in self.remotes}
        lead = self.found_by_node[self.name]
        if self.several:
            shapes = {n: (f.running, f.profile, sorted(f.patches)) for n, f in self.found_by_node.items()}
            if len(set(map(repr, shapes.values()))) > 1:
                said = "; ".join(
                    f"{n}: {'running ' + str(s[1]) if s[0] else 'no server'}, patches "
                    f"{'+'.join(s[2]) or 'none'}"
                    for n, s in shapes.items()
                )
                raise NodesDiffer(
                    f"{self.name}: the nodes of this server differ, so there is no one state to "
                    f"restore: {said} (restart them together or apply/revert on every node first)"
                )
        return lead

    def each(self, fn: Callable[[Remote], Any]) -> list[Any]:
        """fn on every node in turn, node 0 first."""
        return [fn(r) for r in self.remotes]

    def check_profile(self, profile: Any, what: str) -> None:
        """A profile of a server over several nodes runs only on all of them together, and a single-node
        profile only on one host: refused before anything changes (the restart would refuse mid-way)."""
        from sglops.launch.deployment import node_ranks
        from sglops.launch.profiles import load_profile

        p = load_profile(profile) if isinstance(profile, str) else profile
        nnodes = int(p.for_host(self.name).args.get("nnodes", 1))
        if nnodes > 1 and not self.several:
            raise ConfigError(
                f"profile {p.name} is one server over nnodes={nnodes}: run the {what} on its nodes "
                f"together (--hosts {self.name},...)"
            )
        if self.several:
            if nnodes == 1:
                raise ConfigError(
                    f"profile {p.name} is a one-node server: the {what} on the nodes "
                    f"{', '.join(self.names())} needs a profile with nnodes={len(self.remotes)}"
                )
            node_ranks(p, [r.host for r in self.remotes])

    # -- changing ------------------------------------------------------------------------------------
    def apply(self, patch: str) -> None:
        self._all_or_none(patch, "apply")

    def revert(self, patch: str) -> None:
        self._all_or_none(patch, "revert")

    def _all_or_none(self, patch: str, kind: str) -> None:
        """A patch change on every node or on none: a node that
        fails has the nodes already changed take it back."""
        from sglops.patch import apply as patches

        do = patches.apply_patch if kind == "apply" else patches.revert_patch
        undo = patches.revert_patch if kind == "apply" else patches.apply_patch
        done: list[Remote] = []
        for remote in self.remotes:
            try:
                do(remote, patch)
            except SglopsError as exc:
                back = []
                for other in reversed(done):
                    try:
                        undo(other, patch)
                        back.append(other.name)
                    except SglopsError as again:
                        back.append(f"{other.name} NOT taken back ({again})")
                if back:
                    raise type(exc)(f"{exc}; {kind} {patch} taken back on {', '.join(back)}") from None
                raise
            done.append(remote)

    def restart(
        self,
        profile: str | Any,
        *,
        ports: dict[str, int | None] | None = None,
        lock_wait_s: float = 0,
        profile_for: Callable[[str], Any] | None = None,
    ) -> RestartResult:
        """Restart the server: the host's own restart, or every node together (sglops.launch.deployment)."""
        ports = ports or {}
        if not self.several:
            prof = profile_for(self.name) if profile_for else profile
            return launch.restart(self.lead, prof, port=ports.get(self.name), lock_wait_s=lock_wait_s)
        from sglops.launch.deployment import restart_together

        return restart_together(
            self.remotes, profile_for or (lambda _name: profile), ports=ports, lock_wait_s=lock_wait_s
        )

    def stop(self, lock_wait_s: float = 0) -> list[dict]:
        return self.each(lambda r: launch.stop(r, lock_wait_s=lock_wait_s))
