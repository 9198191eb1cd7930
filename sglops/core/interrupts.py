"""Ctrl-C and SIGTERM for work that runs in worker threads (an experiment on the nodes of one server).

Python runs signal handlers in the main thread only, and with several hosts the main thread only waits for the
workers: without this, a Ctrl-C there would leave an ab's rounds running to their end, and a SIGTERM would end
the process without a restore. While several hosts run, the main thread forwards both signals to every guard a
worker registered (sglops.experiment.ab_signals); the guard stops its work at the next step and restores. With
no guard registered the signals do what they always do.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Notified(Protocol):
    def notify(self, signum: int) -> None: ...


_guards: set[Any] = set()
_lock = threading.Lock()


def register(guard: Notified) -> None:
    with _lock:
        _guards.add(guard)


def unregister(guard: Notified) -> None:
    with _lock:
        _guards.discard(guard)


def forward(signum: int) -> bool:
    """Tell every registered guard; False when there is none (the signal keeps its usual meaning)."""
    with _lock:
        guards = list(_guards)
    for g in guards:
        g.notify(signum)
    return bool(guards)


@contextmanager
def forwarding() -> Iterator[None]:
    """In the main thread, while workers run: SIGINT/SIGTERM go to the workers' guards when they have any."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: Any) -> None:
        if forward(signum):
            return
        before = old[signum]
        if callable(before):
            before(signum, frame)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + signum)

    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
