"""The one remote layer: every command that reaches a host goes through `connect(host) -> Remote`.

The layer is split along its seams in sglops/core/transport/ (the command protocol, the base Remote, the local
transport, SSH connect, SSH channel I/O, the memo of host reads) and sglops/core/container.py (a container
target that wraps any transport). This module picks and composes them, and keeps the names callers import from
here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglops.core.container import ContainerRemote
from sglops.core.transport.base import Remote
from sglops.core.transport.command import (
    HOST_PYTHON,
    KILL_GRACE_S,
    ONE_LINE_MAX,
    PROGRESS_MARKER,
    CommandResult,
    one_line,
    shell_command,
)
from sglops.core.transport.command import parse_answer as _parse_answer
from sglops.core.transport.local import LocalRemote
from sglops.core.transport.registry import TARGETS, TRANSPORTS
from sglops.core.transport.ssh_channel import SSHRemote
from sglops.core.transport.ssh_keys import fingerprint, known_hosts_path

if TYPE_CHECKING:
    from sglops.core.host import Host

__all__ = [
    "HOST_PYTHON",
    "KILL_GRACE_S",
    "ONE_LINE_MAX",
    "PROGRESS_MARKER",
    "CommandResult",
    "LocalRemote",
    "Remote",
    "SSHRemote",
    "_parse_answer",
    "connect",
    "fingerprint",
    "known_hosts_path",
    "one_line",
    "shell_command",
]


def connect(host: Host, *, accept_new_host_key: bool = False, inventory: Any = None) -> Remote:
    """A Remote for the host, by the first registered transport that takes it (SSH is opened lazily on first
    use and reused for the task). A host whose inventory names a target inside it (a container) gets a
    ContainerRemote wrapping that transport."""
    kind = next(t for t in TRANSPORTS if t.takes(host))
    transport = kind.open(host, accept_new_host_key=accept_new_host_key, inventory=inventory)
    for target_kind in TARGETS:
        target = target_kind.of(host)
        if target is not None:
            return ContainerRemote(transport, target)
    return transport
