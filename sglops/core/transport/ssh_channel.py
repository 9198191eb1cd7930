"""SSHRemote: a host over SSH, one exec channel per command on one connection (ssh_connect.py) per task.

Why not Fabric's `run`: it pumps stdin 1 KB per 10 ms and leaves remote processes running on timeout. Here a
command runs on a raw channel: stdin in one write, both streams read concurrently until EOF, and every command
is wrapped in the host's `timeout` (command.py) so a timeout really stops it. Files go over SFTP, renamed into
place on arrival.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglops.core import values
from sglops.core.errors import ConnectError, RemoteError, RemoteTimeout
from sglops.core.transport.base import Remote
from sglops.core.transport.command import CommandResult
from sglops.core.transport.spec import Transport
from sglops.core.transport.ssh_connect import close_all, open_connection

if TYPE_CHECKING:
    from sglops.core.host import Host


class SSHRemote(Remote):
    """A host over SSH: one Fabric connection per task, host keys verified against known_hosts."""

    def __init__(self, host: Host, *, accept_new_host_key: bool = False, inventory: Any = None) -> None:
        super().__init__(host)
        self.accept_new_host_key = accept_new_host_key
        self._inventory = inventory
        self._conn = None
        # the jump hosts' connections, first hop first
        self._jumps: list[Any] = []
        self._opening: _Opening | None = None

    # -- connection -----------------------------------------------------------------------
    def open_early(self) -> None:
        """Open the connection in a thread of its own: the TCP connect, Fabric's and Paramiko's imports and
        the handshake (the host's sshd working on the other side) run while the task imports and builds
        its first command."""
        if self._conn is None and self._opening is None:
            self._opening = _Opening(
                lambda: open_connection(self.host, self.accept_new_host_key, self._inventory)
            )

    def _connection(self):
        if self._conn is None:
            if self._opening is not None:
                opening, self._opening = self._opening, None
                self._conn, self._jumps = opening.result()
            else:
                self._conn, self._jumps = open_connection(
                    self.host, self.accept_new_host_key, self._inventory
                )
        return self._conn

    def _close(self) -> None:
        if self._opening is not None:
            # never used: the connection (if it opened) is closed like any other
            opening, self._opening = self._opening, None
            with contextlib.suppress(Exception):
                self._conn, self._jumps = opening.result()
        if self._conn is not None:
            conns, self._conn, self._jumps = [*self._jumps, self._conn], None, []
            close_all(conns)

    def _exec(self, command, stdin, timeout, on_output):
        # loaded with the connection already
        from paramiko import SSHException

        conn = self._connection()
        self.round_trips += 1
        start = time.monotonic()
        try:
            chan = conn.client.get_transport().open_session(timeout=self.host.connect_timeout)
        # transport died under us
        except Exception as exc:
            raise ConnectError(f"{self.name}: SSH session could not be opened: {exc}") from None
        chan.settimeout(timeout)
        try:
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            deadline = time.monotonic() + timeout
            out, err = _read_to_eof(chan, deadline, on_output)
            # The exit status may come before the last output or after the EOF: wait for it only now.
            if not chan.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError
            code = chan.exit_status
            if code == -1 and not chan.get_transport().is_active():
                raise EOFError("the SSH connection closed")
        except TimeoutError:
            raise RemoteTimeout(f"{self.name}: no answer within {timeout:g} s") from None
        except (OSError, EOFError, SSHException) as exc:
            raise ConnectError(
                f"{self.name}: connection lost during a command: {exc or type(exc).__name__}"
            ) from None
        finally:
            chan.close()
        return CommandResult(
            command,
            code,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
            time.monotonic() - start,
        )

    def _put(self, local, remote):
        sftp = self._connection().sftp()
        tmp = f"{remote}.sglops-tmp"
        try:
            sftp.put(os.fspath(local), tmp)
            sftp.posix_rename(tmp, remote)
        except OSError as exc:
            raise RemoteError(f"{self.name}: upload to {remote} failed: {exc}") from None

    def _get(self, remote, local, progress):
        sftp = self._connection().sftp()
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(local.name + ".part")
        try:
            sftp.get(remote, os.fspath(tmp), callback=progress)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise RemoteError(f"{self.name}: download of {remote} failed: {exc}") from None
        os.replace(tmp, local)


class _Opening:
    """work() running in a daemon thread; result() waits for it and returns its value or raises its error."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name="ssh-open", daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self._value = work()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _read_to_eof(chan, deadline: float, on_output: Callable[[str], None] | None) -> tuple[bytes, bytes]:
    """Both streams of a channel, read until the host closed them (EOF), not until its exit status came.

    Why: sshd may send `exit-status` while the end of a large stdout is still on its way (a slow link,
    a full window), so stopping at the exit status loses the end of the answer. SSH delivers a channel's
    messages in order, so once EOF is seen every byte before it is already buffered here.
    """
    out: list[bytes] = []
    err: list[bytes] = []
    pending = b""
    while True:
        if chan.recv_ready():
            chunk = chan.recv(1 << 16)
            out.append(chunk)
            if on_output:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for ln in lines:
                    on_output(ln.decode(errors="replace") + "\n")
        elif chan.recv_stderr_ready():
            err.append(chan.recv_stderr(1 << 16))
        elif chan.eof_received or chan.closed:
            # Seen after both buffers were empty: recheck, data may have landed just before the EOF.
            if not chan.recv_ready() and not chan.recv_stderr_ready():
                break
        else:
            if time.monotonic() > deadline:
                raise TimeoutError
            select.select([chan], [], [], 0.05)
    if on_output and pending:
        on_output(pending.decode(errors="replace"))
    return b"".join(out), b"".join(err)


TRANSPORT = Transport(
    "ssh",
    takes=lambda host: True,
    open=lambda host, **opts: SSHRemote(host, **opts),
    fields={
        "port": values.Port(),
        "user": values.Str(),
        "identity_file": values.Str(),
        "gateway": values.Str(),
        "known_hosts": values.Str(),
        "connect_timeout": values.Float(0.1, 3600),
        "password_env": values.Str(),
    },
)
