"""Loopback ports for sandbox processes: the sandbox never listens anywhere else."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on right now (the kernel's choice; a racing process may still take it first)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]
