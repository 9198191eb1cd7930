"""Every transport that reaches a host and every target kind inside one; the first transport that takes a host
reaches it (ssh takes every host, so it is last). A new transport: its file (a Remote and its `TRANSPORT`) and
one line here."""

from __future__ import annotations

from sglops.core import container
from sglops.core.transport import local, ssh_channel

TRANSPORTS = (
    local.TRANSPORT,
    ssh_channel.TRANSPORT,
)
TARGETS = (container.TARGET,)


def inventory_fields() -> dict:
    """Each inventory field a transport or target reads, with its kind."""
    return {name: kind for entry in (*TRANSPORTS, *TARGETS) for name, kind in entry.fields.items()}
