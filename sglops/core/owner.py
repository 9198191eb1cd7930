"""Who runs this invocation (user, machine, pid), and whether an owner record names a live process here.

`me()` is the one place the laptop asks who the operator is: manifests, the ledger and the lock on a host, the
host's server records all name the operator from it. Host scripts (sglops/host/) cannot import laptop code and
keep their own (facts' hostname): they are told the operator in their args.

A record a command leaves on a host (the ab journal) says who wrote it, so a later command can tell a run
still going on this machine (refuse to interfere) from one that was killed (take over its recovery). A
process on another machine cannot be seen from here: `alive()` answers None for it.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Callable
from typing import Any

from sglops.core.errors import Refused


class HostOwned(Refused):
    """An ab or sweep owns the host (its journal is there): another change would be undone by its restore."""


def me() -> dict:
    """This process as an owner record: the operator's login, this machine's name, this process."""
    return {"user": getpass.getuser(), "machine": socket.gethostname(), "pid": os.getpid()}


def user() -> str:
    """The operator's login name (a run's manifest, a server's start and stop records)."""
    return me()["user"]


def operator() -> str:
    """`user@machine`: who took a host's lock or wrote a ledger entry."""
    m = me()
    return f"{m['user']}@{m['machine']}"


def alive(owner: dict | None) -> bool | None:
    """True: a live process of this machine (not this one); False: gone; None: another machine's (unknown)."""
    if not owner or owner.get("machine") != me()["machine"]:
        return None
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        # this process is the one asking: whatever it wrote earlier is not another run
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        # it exists, as another user
        return True
    return True


def describe(owner: dict | None) -> str:
    if not owner:
        return "an unknown process"
    return f"{owner.get('user', '?')}@{owner.get('machine', '?')} pid {owner.get('pid', '?')}"


def honoured(remote: Any, call: Callable[[dict], dict], what: str, *, take_over: bool = False) -> dict:
    """Run a mutating host step (apply, revert, restart, stop) that respects the host's owner: the step
    refuses on the host while another run's journal is there (sglops/host/ab_journal.py `holder`), unless this
    connection is that run's (`remote.experiment`). A journal whose owner is gone from this machine (an ab or
    sweep cut short) does not hold the host; one whose owner cannot be checked from here (another machine's)
    holds it unless `take_over`; a live owner on this machine always does. When the step ran past a journal,
    the answer's `owner_note` says so (the next ab or sweep still restores what that run found)."""
    extra = {"experiment": getattr(remote, "experiment", None)}
    answer = call(extra)
    held = answer.get("owned_by") if isinstance(answer, dict) else None
    if not held:
        return answer
    live = alive(held.get("owner"))
    who = (
        f"{held.get('what') or 'ab'} {held.get('run_id')} (started {held.get('started', '?')} by "
        f"{describe(held.get('owner'))})"
    )
    if live is False or (live is None and take_over):
        answer = call({**extra, "owner_gone": held.get("run_id")})
        how = (
            "its owner is gone from this machine"
            if live is False
            else "taken over: its owner was not checked"
        )
        note = (
            f"{what} ran although {who} holds this host ({how}); the next ab or sweep restores the state "
            "that run found"
        )
        return {**answer, "owner_note": note} if isinstance(answer, dict) else answer
    hint = (
        "wait for it to end, or stop it (Ctrl-C restores the host)"
        if live
        else "if that run is gone, --take-over (apply/revert: --force) acts anyway"
    )
    raise HostOwned(
        f"{remote.name}: {what} refused: {who} owns this host; its restore would undo this change: {hint}"
    )
