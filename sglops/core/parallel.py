"""Run one step on several hosts at once; every host's outcome is kept and reported.

A thread pool with a worker per host (one SSH connection per host, opened in its worker, so the connections'
set-up runs concurrently), in the spirit of Fabric's ThreadingGroup/GroupResult, and an outcome for every host
whatever happened there: a user error, an unreachable host or a bug (an unexpected exception, kept with its
traceback) on one host never hides another host's result.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sglops.core import interrupts
from sglops.core.errors import EXIT_BUG, EXIT_NAMES, EXIT_OK, SglopsError
from sglops.core.hosts import Host
from sglops.core.remote import Remote, connect

# A worker mostly waits on its host (the network, the host's script): a pool smaller than the host count only
# queues hosts behind others. Measured (benchmarks/bench_fanout.py --pool): 64 hosts' facts took 7.4 / 6.0 /
# 5.7 / 5.6 s with 8 / 16 / 32 / 64 workers, the client's CPU about the same. The bound is the client's
# resources, not the work: each connection holds a socket and paramiko's reader thread, and 256 of them stay
# well inside the usual 1024 open files.
MAX_WORKERS = 256


@dataclass
class Outcome:
    """One host's result, or its error as one line (with its exit class, and a traceback for a bug)."""

    host: Host
    value: Any = None
    error: str | None = None
    seconds: float = 0.0
    exit_code: int = EXIT_OK
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def kind(self) -> str:
        return EXIT_NAMES.get(self.exit_code, "failed")

    def fail(self, exc: BaseException) -> Outcome:
        """This outcome turned into the failure exc stands for (a user error, or a bug with its traceback)."""
        if isinstance(exc, SglopsError):
            self.error, self.exit_code = str(exc), exc.exit_code
        else:
            self.error = f"internal error (a bug in sglops): {type(exc).__name__}: {exc}"
            self.exit_code = EXIT_BUG
            self.traceback = "".join(traceback.format_exception(exc))
        return self

    def fail_from(self, other: Outcome) -> Outcome:
        """Take over other's failure (a later stage of the same host's work failed)."""
        self.error, self.exit_code, self.traceback = other.error, other.exit_code, other.traceback
        return self

    def to_json(self) -> dict:
        doc: dict[str, Any] = {
            "host": self.host.name,
            "ok": False,
            "error": self.error,
            "exit_code": self.exit_code,
            "kind": self.kind,
        }
        if self.traceback:
            doc["traceback"] = self.traceback
        return doc


def guard(host: Host, work: Callable[[], Any]) -> Outcome:
    """work() as host's outcome: its value, or whatever it raised (Ctrl-C still stops everything)."""
    start = time.monotonic()
    out = Outcome(host)
    try:
        out.value = work()
    except Exception as exc:  # noqa: BLE001 - a bug on one host must not hide the others
        out.fail(exc)
    out.seconds = time.monotonic() - start
    return out


def on_hosts(
    hosts: list[Host],
    step: Callable[[Remote], Any],
    *,
    accept_new_host_key: bool = False,
    inventory: Any = None,
    max_workers: int = MAX_WORKERS,
) -> list[Outcome]:
    """Call step(remote) for each host in parallel; returns outcomes in the hosts' order."""

    def work(host: Host) -> Any:
        with connect(host, accept_new_host_key=accept_new_host_key, inventory=inventory) as remote:
            return step(remote)

    if len(hosts) <= 1:
        return [guard(h, lambda h=h: work(h)) for h in hosts]
    with interrupts.forwarding(), ThreadPoolExecutor(max_workers=min(max_workers, len(hosts))) as pool:
        return list(pool.map(lambda h: guard(h, lambda: work(h)), hosts))
