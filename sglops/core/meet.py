"""Hosts of one invocation that must act as one: the nodes of a server over several hosts, meeting at stages.

Why here: every host runs in a worker thread of its own (sglops.core.parallel), which is right for a fleet of
independent hosts and wrong for the nodes of one server (they start together, a patch goes on all or none, one
dead node makes the server unhealthy). A `Meeting` lets each node's thread hand its value for a stage and wait
for the others'; a node that fails outside a stage, or could not be reached at all, releases the others at
once with one line instead of leaving them waiting.
"""

from __future__ import annotations

import threading
from typing import Any

from sglops.core.errors import SglopsError
from sglops.core.hosts import Host

# the longest a node waits for the others at a stage that starts no server
MEET_S = 120.0
_registry: dict[tuple, Meeting] = {}
_lock = threading.Lock()


def one_server(hosts: tuple[Host, ...] | list[Host]) -> bool:
    """Whether these hosts are the nodes of one server: two or more, each with an inventory node_rank, the
    ranks exactly 0..N-1 (the operator's own declaration; a fleet of independent hosts gives none)."""
    ranks = [h.node_rank for h in hosts]
    return len(ranks) > 1 and None not in ranks and sorted(ranks) == list(range(len(ranks)))


class Meeting:
    """The threads of some hosts of one invocation, meeting at named stages."""

    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self._stages: dict[str, dict[str, Any]] = {}
        self._barrier = threading.Barrier(len(names))
        self._gone: list[str] = []
        self._mine = threading.Lock()

    @classmethod
    def of(cls, run_id: str, what: str, names: list[str]) -> Any:
        """The one meeting of these hosts for `what` in this invocation (the first thread to ask makes it)."""
        key = (cls, run_id, what, tuple(sorted(names)))
        with _lock:
            found = _registry.get(key)
            if found is None:
                found = _registry[key] = cls(names)
            return found

    def gather(self, stage: str, host: str, value: Any, timeout: float | None = MEET_S) -> dict[str, Any]:
        """Every host's value at this stage: this host gives its own and waits for the rest."""
        with self._mine:
            self._stages.setdefault(stage, {})[host] = value
        try:
            self._barrier.wait(timeout)
        except threading.BrokenBarrierError:
            missing = self._gone or [n for n in self.names if n not in self._stages.get(stage, {})]
            raise SglopsError(
                f"{host}: the nodes stopped before '{stage}': {', '.join(missing) or '?'} did not get "
                "there (unreachable, or failed first: see their lines)"
            ) from None
        return dict(self._stages[stage])

    def leave(self, host: str | None = None) -> None:
        """A host fails outside a stage (or was never reached): nobody waits for it."""
        if host:
            with self._mine:
                self._gone.append(host)
        self._barrier.abort()


def forget(run_id: str) -> None:
    """Drop the meetings of a finished invocation."""
    with _lock:
        for key in [k for k in _registry if k[1] == run_id]:
            del _registry[key]


def lead(ctx: Any, what: str, work: Any) -> Any:
    """An experiment on the nodes of one server: node 0's thread runs `work(remotes)` with every node's
    connection (node 0 first) while the other nodes' threads lend theirs and wait for it to end; every node's
    result is node 0's (the experiment is the server's, not a host's). Hosts that are not one server are
    refused in one line."""
    names = [h.name for h in ctx.peers]
    if len(names) > 1 and not one_server(ctx.peers):
        raise SglopsError(
            f"{what} runs on one host or on the nodes of one server (inventory node_rank 0..N-1 on "
            f"each of --hosts); {', '.join(names)} are not one server"
        )
    if len(names) <= 1:
        return work([ctx.remote])
    meeting = Meeting.of(ctx.run_id, f"lead {what}", names)
    every = meeting.gather("connected", ctx.remote.name, ctx.remote)
    remotes = sorted(every.values(), key=lambda r: r.host.node_rank or 0)
    if ctx.remote.host.node_rank != 0:
        result, failed = meeting.gather("done", ctx.remote.name, (None, None), timeout=None)[remotes[0].name]
        if failed is not None:
            err = SglopsError(
                f"{ctx.remote.name}: node of the server {what} ran on through {remotes[0].name}: {failed}"
            )
            err.exit_code = getattr(failed, "exit_code", err.exit_code)
            raise err
        return result
    outcome: tuple[Any, BaseException | None] = (None, None)
    try:
        outcome = (work(remotes), None)
        return outcome[0]
    except BaseException as exc:
        outcome = (None, exc)
        raise
    finally:
        meeting.gather("done", ctx.remote.name, outcome, timeout=None)
