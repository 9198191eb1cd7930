"""Ctrl-C and SIGTERM during an `inv ab`: the rounds stop, the restore runs to its end, one line says how.

During the rounds a SIGINT (KeyboardInterrupt) or SIGTERM (`Interrupted`, which the default handler would
turn into an exit that runs no `finally`) stops the round in progress. From the moment the restore begins,
both are deferred: noted, "restoring, please wait" said once, never raised, so a second (or tenth) Ctrl-C
cannot leave a patch applied behind the operator's back. A SIGKILL cannot be deferred: the journal on the
host (sglops.experiment.ab_journal) covers that. Handlers can only be set from the main thread; in a worker
(an experiment on the nodes of one server) the main thread forwards the signals (sglops.core.interrupts) and
the work stops at its next step (`check_interrupt`).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from sglops.core import interrupts
from sglops.core.errors import SglopsError


def wait_line(who: str = "ab") -> str:
    return f"restoring, please wait (the host is being put back as {who} found it)"


WAIT_LINE = wait_line()


class Interrupted(BaseException):
    """A SIGTERM during the rounds (SIGINT arrives as KeyboardInterrupt): not an Exception, like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_name(exc: BaseException) -> tuple[str, int]:
    """(name, number) of the signal behind an interruption."""
    num = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    return signal.Signals(num).name, int(num)


def _to_stderr(text: str) -> None:
    """A raw write to fd 2: safe inside a signal handler (a print() there may re-enter a buffered stream)."""
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


class Guard:
    """The handlers of one ab: `rounds` (interrupts raise) until `restoring()` (interrupts are deferred)."""

    def __init__(self, say: Callable[[str], None] | None = None, who: str = "ab") -> None:
        self.say = say or _to_stderr
        self.wait_line = wait_line(who)
        self.deferred: list[int] = []
        self.phase = "rounds"
        # a signal forwarded to a worker's guard, raised at its next step
        self.pending: int | None = None
        self._lock = threading.Lock()

    def notify(self, signum: int) -> None:
        """A signal forwarded from the main thread (this guard's work runs in a worker)."""
        with self._lock:
            if self.phase == "rounds":
                if self.pending is None:
                    self.say(
                        f"{signal.Signals(signum).name}: stopping after the step in progress, then restoring"
                    )
                    self.pending = signum
                return
        if not self.deferred:
            self.say(self.wait_line)
        self.deferred.append(signum)

    def check(self) -> None:
        """Raise a forwarded signal, as the main thread's
        handler would have, while the work may still stop."""
        with self._lock:
            signum, self.pending = (self.pending, None) if self.phase == "rounds" else (None, self.pending)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        if signum is not None:
            raise Interrupted(signum)

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        if self.phase == "rounds":
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise Interrupted(signum)
        if not self.deferred:
            self.say(self.wait_line)
        self.deferred.append(signum)

    def restoring(self) -> None:
        """From now on every SIGINT/SIGTERM waits for the restore."""
        with self._lock:
            self.phase = "restoring"
            if self.pending is not None:
                self.deferred.append(self.pending)
                self.pending = None

    def first_deferred(self) -> int | None:
        return self.deferred[0] if self.deferred else None

    def run_then_restore(
        self,
        work: Callable[[], None],
        restore: Callable[[], None],
        result: Any,
        where: Callable[[], str | None],
    ) -> None:
        """ab's and sweep's shape: run the changes; a domain error or an interrupt ends them (said in
        `result.failure` / `result.interrupted`); the restore always runs, with signals deferred; a signal
        that arrived during it is recorded too."""
        try:
            work()
        except SglopsError as exc:
            result.failure = str(exc)
        except (KeyboardInterrupt, Interrupted) as exc:
            self.restoring()
            result.interrupted = signal_name(exc)[0]
            result.failure = f"interrupted by {result.interrupted} during {where() or 'the set-up'}"
        # whatever stopped the changes: the host goes back to how it was found, signals deferred
        finally:
            self.restoring()
            restore()
        late = self.first_deferred()
        if late is not None and result.interrupted is None:
            result.interrupted = signal.Signals(late).name


_local = threading.local()


def check_interrupt() -> None:
    """At a step boundary of guarded work in a worker thread: raise the signal the main thread forwarded."""
    guard = getattr(_local, "guard", None)
    if guard is not None:
        guard.check()


@contextmanager
def guarded_ab(say: Callable[[str], None] | None = None, who: str = "ab") -> Iterator[Guard]:
    """Install the ab's handlers for SIGINT and SIGTERM (main thread only); the old ones come back after."""
    guard = Guard(say, who)
    if threading.current_thread() is not threading.main_thread():
        _local.guard = guard
        interrupts.register(guard)
        try:
            yield guard
        finally:
            interrupts.unregister(guard)
            _local.guard = None
        return
    sigs = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        signal.signal(s, guard._handler)
    try:
        yield guard
    finally:
        for s in sigs:
            signal.signal(s, old[s])
