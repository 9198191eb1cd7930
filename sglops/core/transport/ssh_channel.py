"""SSHRemote: a host over SSH, one exec channel per command on one connection (ssh_connect.py) per task.

Why not Fabric's `run`: it pumps stdin 1 KB per 10 ms and leaves remote processes running on timeout. Here a
command runs on a raw channel: stdin in one write, both streams read concurrently until EOF, and every command
is wrapped in the host's `timeout` (command.py) so a timeout really stops it. Files go over SFTP, renamed into
place on arrival.
"""

from __future__ import annotations

import os
import select
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

    # -- connection -----------------------------------------------------------------------
    def _connection(self):
        if self._conn is None:
            self._conn, self._jumps = open_connection(self.host, self.accept_new_host_key, self._inventory)
        return self._conn

    def _close(self) -> None:
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
