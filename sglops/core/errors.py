"""User-facing errors and the exit codes they end in (tracebacks are for bugs).

Exit codes, one per class of failure (documented in README "Exit codes"):

    0  ok
    1  FAILED   the work ran and did not succeed: a server that did not come up, a bench with failed
                requests, a play that stopped at a step
    2  USAGE    a bad flag, value, name or file: nothing was touched
    3  CONNECT  a host could not be reached or refused us (unreachable, auth, host key)
    4  TIMEOUT  a step ran past its time limit on the host (it was killed there)
    5  REMOTE   a step failed on the host (its one line says what and where)
    6  REFUSED  the host's state forbids the change (conflict, drift, lock, build failure): nothing changed
    7  MIXED    several hosts failed, in different classes (each host's line and --json say which)
    8  DIFFER   a comparison that required identical outputs (or the same server config) found a difference
  130  INTERRUPTED  Ctrl-C (SIGINT; 143 for SIGTERM, 128 + the signal as a shell counts): what had to be put
                back was put back first, and the line says how the host was left
   70  BUG      an unexpected exception in sglops (EX_SOFTWARE): the traceback is printed and kept in --json

With several hosts the exit code is the class all failed hosts share, else MIXED.
"""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONNECT = 3
EXIT_TIMEOUT = 4
EXIT_REMOTE = 5
EXIT_REFUSED = 6
EXIT_MIXED = 7
EXIT_DIFFER = 8
EXIT_BUG = 70
# 128 + SIGINT
EXIT_INTERRUPTED = 130

EXIT_NAMES = {
    EXIT_OK: "ok",
    EXIT_FAILED: "failed",
    EXIT_USAGE: "usage",
    EXIT_CONNECT: "connect",
    EXIT_TIMEOUT: "timeout",
    EXIT_REMOTE: "remote",
    EXIT_REFUSED: "refused",
    EXIT_MIXED: "mixed",
    EXIT_DIFFER: "differ",
    EXIT_BUG: "bug",
    EXIT_INTERRUPTED: "interrupted",
    143: "interrupted",
}


def combined_exit(codes: Iterable[int]) -> int:
    """The exit code of a run over several hosts: 0, the one class every failure shares, or MIXED."""
    failed = {c for c in codes if c != EXIT_OK}
    if not failed:
        return EXIT_OK
    return failed.pop() if len(failed) == 1 else EXIT_MIXED


class SglopsError(Exception):
    """An error the user can cause or fix; `str()` is the one line they see.

    A domain's own errors subclass the class of their failure below (never set `exit_code` themselves).
    `kept`: a result worth recording although the work failed (a crashed start, a failed build); the runner
    records and shows it, then reports `recorded(path)`, the same line (a subclass may name the record)."""

    exit_code = EXIT_USAGE
    kept: object | None = None

    def recorded(self, path: object) -> SglopsError:
        return self


class ConfigError(SglopsError):
    """A YAML file, inventory entry or argument is wrong."""


class HostNotFound(SglopsError):
    """A --host name is neither in the inventory nor an address."""


class ConnectError(SglopsError):
    """The host could not be reached or refused us (unreachable, auth, host key)."""

    exit_code = EXIT_CONNECT


class HostKeyError(ConnectError):
    """The host key is unknown or changed: never silently accepted."""


class RemoteTimeout(SglopsError):
    """A remote command ran past its timeout (it was killed on the host)."""

    exit_code = EXIT_TIMEOUT


class RemoteError(SglopsError):
    """A remote command or script failed; the message names what and where."""

    exit_code = EXIT_REMOTE


class Failed(SglopsError):
    """The work ran and did not succeed (server did not come up, bench with failed requests, play stopped)."""

    exit_code = EXIT_FAILED


class OutputsDiffer(SglopsError):
    """--require-identical / --require-same-config: the runs' outputs (or server configs) differ."""

    exit_code = EXIT_DIFFER


class Refused(SglopsError):
    """The host's state forbids the change (conflict, drift, lock, a build that failed): nothing changed."""

    exit_code = EXIT_REFUSED


class Interrupted(SglopsError):
    """The operator stopped the work with a signal; the
    line says what was put back (exit 128 + the signal)."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, signum: int = 2) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum
