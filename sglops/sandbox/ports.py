"""Loopback ports for sandbox processes: the sandbox never listens anywhere else."""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(v) for v in _EPHEMERAL.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nothing holds right now, below the kernel's ephemeral range.

    A port the kernel hands out for `bind(0)` can be handed out again as the source port of any outgoing
    connection (a gloo pair, a health poll) in the minutes before a server binds it: a two-node start then
    dies with "address already in use". Below the ephemeral range only an explicit bind takes a port.
    """
    low, _ = _ephemeral_range()
    if low - _LOWEST < 1000:
        with socket.socket() as s:
            s.bind((LOOPBACK, 0))
            return s.getsockname()[1]
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(_LOWEST, low)
        if _bindable(port):
            return port
    raise OSError(f"no free loopback port between {_LOWEST} and {low}")
