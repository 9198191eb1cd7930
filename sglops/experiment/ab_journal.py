"""The experiment journal on the host: "an ab (or sweep) is
in progress, or was cut short; the state to restore is X".

The state that must survive the laptop is the host's own: the server and patch set the experiment found before
its first change. It is written (sglops/host/ab_journal.py, beside the patch ledger) before the first change
and removed only once the restore has brought that state back. So after a SIGKILL, a lost connection or a
failed restore, the next `inv ab` or `inv sweep` restores X rather than taking the patched state it finds as
the one to restore, and `inv patches` says one was cut short (sglops.patch.apply reads the same file). On a
server over several nodes every node keeps its own journal (its own found state), each naming every node.
Writing it is create-exclusive on the host: of two operators who both found no journal, the second is refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sglops.core import owner
from sglops.core.errors import Refused
from sglops.core.remote import Remote
from sglops.experiment.ab_plan import Found

VERSION = 1


class AbInProgress(Refused):
    """Another ab or sweep owns the host: two would restore each other's state."""


@dataclass
class Journal:
    """An ab's journal as read from the host."""

    run_id: str
    found: Found
    managed: list[str]
    owner: dict
    started: str
    # earlier interrupted runs whose found state this one carries on
    adopted_from: list[str]
    # ab | sweep
    what: str = "ab"
    # every node of the server ({host, node_rank}) when several
    nodes: list[dict] = field(default_factory=list)

    @classmethod
    def from_json(cls, doc: dict) -> Journal:
        f = doc.get("found") or {}
        return cls(
            str(doc.get("run_id")),
            Found(bool(f.get("running")), f.get("profile"), f.get("port"), list(f.get("patches") or [])),
            list(doc.get("managed") or []),
            doc.get("owner") or {},
            str(doc.get("started") or "?"),
            list(doc.get("adopted_from") or []),
            str(doc.get("what") or "ab"),
            list(doc.get("nodes") or []),
        )

    def to_json(self) -> dict:
        return {
            "kind": "sglops-ab-journal",
            "version": VERSION,
            "run_id": self.run_id,
            "found": self.found.to_json(),
            "managed": self.managed,
            "owner": self.owner,
            "started": self.started,
            "adopted_from": self.adopted_from,
            "what": self.what,
            "nodes": self.nodes,
        }

    def live(self) -> bool | None:
        return owner.alive(self.owner)

    def line(self) -> str:
        """What `inv ab` and `inv patches` say about it."""
        return state_line(self.to_json(), self.live())


def state_line(doc: dict, live: bool | None) -> str:
    """One line on a journal (a dict as the host keeps it), for any caller."""
    f = doc.get("found") or {}
    was = (
        f"server {f.get('profile')} on port {f.get('port')}" if f.get("running") else "no sglops server"
    ) + f", patches {'+'.join(f.get('patches') or []) or 'none'}"
    who = f"started {doc.get('started', '?')} by {owner.describe(doc.get('owner'))}"
    what = doc.get("what") or "ab"
    nodes = doc.get("nodes") or []
    over = f" over nodes {', '.join(str(n.get('host')) for n in nodes)}" if len(nodes) > 1 else ""
    if live:
        return f"{what} {doc.get('run_id')}{over} in progress ({who}); it restores {was} when it ends"
    return (
        f"{what} {doc.get('run_id')}{over} was cut short ({who}); the state to restore is {was}: the next "
        "`inv ab` or `inv sweep` restores it"
    )


def read(remote: Remote) -> Journal | None:
    doc = remote.reading(
        lambda: remote.run_py("ab_journal", {"sglang_root": remote.host.sglang_root, "action": "read"})
    )["journal"]
    return Journal.from_json(doc) if doc else None


def check_not_live(journal: Journal | None, host: str) -> None:
    """An ab still running on this machine is refused; one
    that is gone (or another machine's) is taken over."""
    if journal is not None and journal.live():
        raise AbInProgress(f"{host}: {journal.line()}; wait for it or stop it (Ctrl-C restores the host)")


def begin(
    remote: Remote,
    run_id: str,
    found: Found,
    managed: list[str],
    earlier: Journal | None,
    *,
    what: str = "ab",
    nodes: list[dict] | None = None,
) -> Journal:
    """Written before the first change: from here on the host says what to restore. Refused (nothing written)
    when another run began on the host since it was read."""
    j = Journal(
        run_id,
        found,
        managed,
        owner.me(),
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        [*earlier.adopted_from, earlier.run_id] if earlier else [],
        what,
        list(nodes or []),
    )
    answer = remote.run_py(
        "ab_journal",
        {
            "sglang_root": remote.host.sglang_root,
            "action": "begin",
            "doc": j.to_json(),
            "takes_over": earlier.run_id if earlier else None,
        },
    )
    if not answer.get("begun"):
        other = Journal.from_json(answer.get("journal") or {})
        raise AbInProgress(
            f"{remote.name}: {other.line()}; nothing was changed (wait for it, or stop it: Ctrl-C "
            "restores the host)"
        )
    return j


def end(remote: Remote, run_id: str) -> dict[str, Any]:
    """Removed once the found state is back (only this run's journal: a newer one is never dropped)."""
    return remote.run_py(
        "ab_journal", {"sglang_root": remote.host.sglang_root, "action": "clear", "run_id": run_id}
    )
