"""Remote: what every target offers (run a command, run a host step, files in and out) over one transport.

A transport implements four things: `_exec(command, stdin, timeout, on_output) -> CommandResult` (one shell
line, stdin as one byte stream, both output streams read to the end), `_put`, `_get` (atomic: temp file +
rename) and `_close`. Everything else (quoting, time limits, the answer of a host step, one-line errors, the
memo of host reads) is here, once. Transports: LocalRemote (local.py), SSHRemote (ssh_channel.py); a Remote
that wraps another one (a container target, sglops/core/container.py) implements the same four by delegating.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglops.core import redact
from sglops.core.errors import RemoteError, RemoteTimeout
from sglops.core.host_bundle import BOOTSTRAP, payload
from sglops.core.transport.command import (
    HOST_PYTHON,
    CommandResult,
    exec_timeout,
    one_line,
    parse_answer,
    progress_relay,
    shell_command,
)
from sglops.core.transport.memo import Memo

if TYPE_CHECKING:
    from sglops.core.host import Host


class Remote:
    """A host we can run commands and stdlib Python scripts
    on (SSH, this machine, or a target wrapping either)."""

    name: str
    python: str
    # the container target (sglops/core/container.py) when steps run inside one
    container: Any = None
    # commands that reached the host (a transport counts them in `_exec`)
    round_trips: int = 0
    # the invocation's run, set by the runner: the host answers it keeps are named by it
    run_id: str | None = None
    # the ab or sweep that owns the host through this connection (sglops.core.owner)
    experiment: str | None = None
    answers_kept: int = 0

    def __init__(self, host: Host) -> None:
        self.host = host
        self.name = host.name
        self.python = host.python or "python3"
        self.memo = Memo()

    # -- a transport implements these -------------------------------------------------------
    def _exec(
        self, command: str, stdin: bytes | None, timeout: float, on_output: Callable[[str], None] | None
    ) -> CommandResult:
        raise NotImplementedError

    def _put(self, local: str | os.PathLike, remote: str) -> None:
        raise NotImplementedError

    def _get(
        self, remote: str, local: str | os.PathLike, progress: Callable[[int, int], None] | None
    ) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        pass

    def host_side(self) -> Remote:
        """Who runs the host's own commands (`run_py(on_host=True)`):
        this remote, or the one a target wraps."""
        return self

    # -- shared ---------------------------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
        check: bool = True,
        stdin: bytes | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        """Run argv on the host (quoted for you); raise RemoteError on failure when check."""
        self.memo.step()
        result = self._exec(
            shell_command(argv, cwd=cwd, env=env, timeout=timeout), stdin, exec_timeout(timeout), on_output
        )
        if result.exit_code == 124:
            raise RemoteTimeout(
                f"{self.name}: `{shlex.join(argv)}` timed out after {timeout:g} s (stopped on the host)"
            )
        if check and not result.ok:
            output = result.stderr.strip() or result.stdout.strip()
            line = (output.splitlines()[-1:] or ["no output"])[0]
            shown = one_line(line)
            where = ""
            if shown != output and output:
                where = f" (whole output in {self._keep_answer(argv[0], result)})"
            raise RemoteError(
                f"{self.name}: `{redact.text(one_line(shlex.join(argv)))}` exited {result.exit_code}: "
                f"{redact.text(shown)}{where}"
            )
        return result

    def run_py(
        self,
        script: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float = 120,
        on_progress: Callable[[dict], None] | None = None,
        on_host: bool = False,
    ) -> Any:
        """Run a stdlib script from sglops/host on the host: one round trip, JSON back.

        The script and the host modules it imports go over stdin as one bundle (sglops/core/host_bundle.py).
        A script may report progress with `progress(**fields)` (from _common); each report reaches
        on_progress as a dict while the script runs. on_host: run it on the host itself with the host's
        `python3`, outside a container target (the engine's own commands: restart shape (b)).
        """
        self.memo.step()
        if on_host and self.host_side() is not self:
            return self.host_side().run_py(
                script, args, timeout=timeout, on_progress=on_progress, on_host=True
            )
        line = shell_command([HOST_PYTHON if on_host else self.python, "-c", BOOTSTRAP], timeout=timeout)
        result = self._exec(line, payload(script, args), exec_timeout(timeout), progress_relay(on_progress))
        if result.exit_code == 124:
            raise RemoteTimeout(
                f"{self.name}: remote step {script} timed out after {timeout:g} s (stopped on the host)"
            )
        return self._answer(script, result)

    def _answer(self, script: str, result: CommandResult) -> Any:
        """A host step's result from its JSON answer, or one error line (the whole answer kept in a log)."""
        answer = parse_answer(result)
        if answer is None:
            detail = (
                result.stderr.strip().splitlines() or result.stdout.strip().splitlines() or ["no output"]
            )[-1]
            if result.exit_code == 127 or "not found" in detail:
                detail = f"{one_line(detail)} (is `python: {self.python}` right for this host?)"
            log = self._keep_answer(script, result)
            raise RemoteError(
                f"{self.name}: remote step {script} gave no answer (exit {result.exit_code}): "
                f"{redact.text(one_line(detail))} (whole answer in {log})"
            )
        if not answer["ok"]:
            error = str(answer.get("error"))
            # written by our own script, though it may quote host text
            shown = one_line(error, limit=1000)
            more = f" (whole answer in {self._keep_answer(script, result)})" if shown != error else ""
            if answer.get("user"):
                raise RemoteError(f"{self.name}: {shown}{more}")
            last = answer.get("traceback", "").strip().splitlines()
            where = next((ln.strip() for ln in reversed(last) if ln.strip().startswith("File")), "")
            raise RemoteError(
                f"{self.name}: remote step {script} failed: {answer.get('type')}: {shown} "
                f"[{one_line(where)}]{more}"
            )
        return answer["result"]

    def remembered(self, key: Hashable, read: Callable[[], Any], *, lasting: bool = False) -> Any:
        """A read of the host's state (facts, the tree, the ledger), asked once on this connection.

        The answer holds until the next step that is not such a read (it may change the host); `lasting`
        ones (where the tree is) hold until the connection closes. See transport/memo.py.
        """
        return self.memo.get(key, read, lasting=lasting)

    def reading(self, read: Callable[[], Any]) -> Any:
        """Run `read`, steps that only read the host, without dropping what this connection remembered."""
        with self.memo.reading():
            return read()

    def put(self, local: str | os.PathLike, remote: str) -> None:
        """Upload a file, atomically in place (a temp file renamed)."""
        self.memo.step()
        self._put(local, remote)

    def get(
        self, remote: str, local: str | os.PathLike, progress: Callable[[int, int], None] | None = None
    ) -> None:
        """Download a file, atomically in place locally (a .part file renamed)."""
        self._get(remote, local, progress)

    def close(self) -> None:
        self.memo.clear()
        self._close()

    def _keep_answer(self, step: str, result: CommandResult) -> Path:
        """Write a host's whole answer to a log file under artifacts/ (secrets masked); errors name it."""
        from sglops.core import artifacts

        folder = artifacts.artifacts_root() / artifacts.safe_name(self.name) / "remote-answers"
        folder.mkdir(parents=True, exist_ok=True)
        # the run id is the runner's (none outside one: the time); never a second one minted
        self.answers_kept += 1
        when = self.run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{os.getpid()}"
        path = folder / f"{when}-{self.answers_kept}-{artifacts.safe_name(os.path.basename(step))}.log"
        path.write_text(
            redact.text(
                f"host: {self.name}\nstep: {step}\nexit: {result.exit_code}\nseconds: {result.seconds:.3f}\n"
                f"stdout: {len(result.stdout)} characters\nstderr: {len(result.stderr)} characters\n"
                f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}\n"
            )
        )
        return path

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
