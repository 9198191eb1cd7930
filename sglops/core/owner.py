"""Who runs this invocation (user, machine, pid), and whether an owner record names a live process here.

A record a command leaves on a host (the ab journal) says who wrote it, so a later command can tell a run
still going on this machine (refuse to interfere) from one that was killed (take over its recovery). A
process on another machine cannot be seen from here: `alive()` answers None for it.
"""

from __future__ import annotations

import getpass
import os
import socket


def me() -> dict:
    """This process as an owner record."""
    return {"user": getpass.getuser(), "machine": socket.gethostname(), "pid": os.getpid()}


def alive(owner: dict | None) -> bool | None:
    """True: a live process of this machine (not this one); False: gone; None: another machine's (unknown)."""
    if not owner or owner.get("machine") != socket.gethostname():
        return None
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return False  # this process is the one asking: whatever it wrote earlier is not another run
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user
    return True


def describe(owner: dict | None) -> str:
    if not owner:
        return "an unknown process"
    return f"{owner.get('user', '?')}@{owner.get('machine', '?')} pid {owner.get('pid', '?')}"
