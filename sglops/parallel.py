"""Run one step on several hosts at once; every host's outcome is kept and reported.

A bounded thread pool (one SSH connection per host, opened in its worker), in the spirit
of Fabric's ThreadingGroup but with a bound, per-host errors that never hide the others,
and a recap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sglops.errors import SglopsError
from sglops.hosts import Host
from sglops.remote import Remote, connect

MAX_WORKERS = 16


@dataclass
class Outcome:
    """One host's result, or its error as one line."""

    host: Host
    value: Any = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def on_hosts(
    hosts: list[Host],
    step: Callable[[Remote], Any],
    *,
    accept_new_host_key: bool = False,
    inventory: Any = None,
    max_workers: int = MAX_WORKERS,
) -> list[Outcome]:
    """Call step(remote) for each host in parallel; returns outcomes in the hosts' order."""

    def one(host: Host) -> Outcome:
        start = time.monotonic()
        try:
            with connect(host, accept_new_host_key=accept_new_host_key, inventory=inventory) as remote:
                return Outcome(host, value=step(remote), seconds=time.monotonic() - start)
        except SglopsError as exc:
            return Outcome(host, error=str(exc), seconds=time.monotonic() - start)

    if len(hosts) == 1:
        return [one(hosts[0])]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(hosts))) as pool:
        return list(pool.map(one, hosts))
