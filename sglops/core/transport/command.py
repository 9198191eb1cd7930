"""The command protocol: what a host is sent (one quoted shell line with its `timeout`) and what comes back.

Every argument is quoted here (`shlex.join`); nobody else builds shell strings. A host step (`run_py`) answers
one JSON line after RESULT_MARKER and may report progress lines after PROGRESS_MARKER.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sglops.core.host_bundle import RESULT_MARKER

PROGRESS_MARKER = "@@SGLOPS-PROGRESS@@"
KILL_GRACE_S = 5
# runs host-side steps outside a container target (the inventory `python` is the container's)
HOST_PYTHON = "python3"
ONE_LINE_MAX = 400


@dataclass
class CommandResult:
    """What a finished remote command left behind."""

    command: str
    exit_code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def shell_command(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> str:
    """Build the one shell line a host runs: every piece quoted, wrapped in `timeout`."""
    if not argv:
        raise ValueError("empty command")
    parts: list[str] = []
    if cwd:
        parts.append(f"cd {shlex.quote(cwd)} &&")
    words = list(argv)
    if env:
        words = ["env", *[f"{k}={v}" for k, v in env.items()], *words]
    if timeout:
        words = ["timeout", "-k", str(KILL_GRACE_S), f"{max(1, int(timeout + 0.999))}", *words]
    parts.append(shlex.join(words))
    return " ".join(parts)


def exec_timeout(timeout: float) -> float:
    """How long the laptop waits for a command the host stops after `timeout` (its grace, then a margin)."""
    return timeout + KILL_GRACE_S + 5


def one_line(text: str, limit: int = ONE_LINE_MAX) -> str:
    """The first line of a host's text, cut to `limit`
    characters: an error line never carries a whole answer."""
    lines = text.strip().splitlines() or [""]
    first = lines[0].strip()
    if len(first) > limit:
        return first[:limit] + f"... ({len(text)} characters)"
    if len(lines) > 1:
        return first + f" ... (+{len(lines) - 1} lines)"
    return first


def parse_answer(result: CommandResult) -> dict | None:
    """The JSON answer a host step printed after RESULT_MARKER, or None when there is none (or it is cut)."""
    idx = result.stdout.rfind(RESULT_MARKER)
    if idx < 0:
        return None
    try:
        return json.loads(result.stdout[idx + len(RESULT_MARKER) :].strip().splitlines()[0])
    except (ValueError, IndexError):
        return None


def progress_relay(on_progress: Callable[[dict], None] | None) -> Callable[[str], None] | None:
    """An output-line callback handing each progress report of a host step to on_progress as a dict."""
    if on_progress is None:
        return None

    def relay(line: str) -> None:
        if line.startswith(PROGRESS_MARKER):
            try:
                on_progress(json.loads(line[len(PROGRESS_MARKER) :]))
            except ValueError:
                pass

    return relay
