"""The one remote layer: every command that reaches a host goes through here.

Why a layer of our own over Fabric's `Connection`: Fabric handles ssh_config, auth and
ProxyJump well, but accepts any host key, pumps stdin 1 KB per 10 ms, and leaves remote
processes running on timeout. Here we keep Fabric for the connection, verify host keys
ourselves, exec on a raw channel (stdin in one write, both streams read concurrently),
and wrap every command in the host's `timeout` so a timeout really stops it.

Every argument is quoted here (`shlex.join`); nobody else builds shell strings.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglops.core import redact
from sglops.core.errors import ConfigError, ConnectError, HostKeyError, RemoteError, RemoteTimeout
from sglops.core.host_bundle import BOOTSTRAP, RESULT_MARKER, payload
from sglops.core.ssh_config import ssh_config_path

if TYPE_CHECKING:
    from sglops.core.hosts import Host

PROGRESS_MARKER = "@@SGLOPS-PROGRESS@@"
KILL_GRACE_S = 5
HOST_PYTHON = "python3"  # runs host-side steps outside a container target (the inventory `python` is the container's)

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


class Remote:
    """A host we can run commands and stdlib Python scripts on (SSH or this machine)."""

    name: str
    python: str

    def __init__(self, host: Host) -> None:
        from sglops.core.container import ContainerTarget

        self.host = host
        self.name = host.name
        self.python = host.python or "python3"
        self.round_trips = 0
        self.container = (ContainerTarget(host.container, host.container_engine or "docker", host.container_user)
                          if host.container else None)
        self._container_identity: str | None = None  # '<id> <image>', learnt by the first step

    # -- to implement -------------------------------------------------------------------
    def _exec(
        self,
        command: str,
        stdin: bytes | None,
        timeout: float,
        on_output: Callable[[str], None] | None,
    ) -> CommandResult:
        raise NotImplementedError

    def put(self, local: str | os.PathLike, remote: str) -> None:
        raise NotImplementedError

    def get(self, remote: str, local: str | os.PathLike, progress: Callable[[int, int], None] | None = None) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    # -- shared ---------------------------------------------------------------------------
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
        command = self._on_target(shell_command(argv, cwd=cwd, env=env, timeout=timeout))
        result = self._exec(command, stdin, timeout + KILL_GRACE_S + 5, on_output)
        self._check_target(result)
        if result.exit_code == 124:
            raise RemoteTimeout(f"{self.name}: `{shlex.join(argv)}` timed out after {timeout:g} s (stopped on the host)")
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
        line = shell_command([HOST_PYTHON if on_host else self.python, "-c", BOOTSTRAP], timeout=timeout)
        command = line if on_host else self._on_target(line)
        relay = None
        if on_progress is not None:
            def relay(line: str) -> None:
                if line.startswith(PROGRESS_MARKER):
                    try:
                        on_progress(json.loads(line[len(PROGRESS_MARKER):]))
                    except ValueError:
                        pass
        result = self._exec(command, payload(script, args), timeout + KILL_GRACE_S + 5, relay)
        if not on_host:
            self._check_target(result)
        if result.exit_code == 124:
            raise RemoteTimeout(f"{self.name}: remote step {script} timed out after {timeout:g} s (stopped on the host)")
        answer = _parse_answer(result)
        if answer is None:
            detail = (result.stderr.strip().splitlines() or result.stdout.strip().splitlines() or ["no output"])[-1]
            if result.exit_code == 127 or "not found" in detail:
                detail = f"{one_line(detail)} (is `python: {self.python}` right for this host?)"
            log = self._keep_answer(script, result)
            raise RemoteError(f"{self.name}: remote step {script} gave no answer (exit {result.exit_code}): "
                              f"{redact.text(one_line(detail))} (whole answer in {log})")
        if not answer["ok"]:
            error = str(answer.get("error"))
            shown = one_line(error, limit=1000)  # written by our own script, though it may quote host text
            more = f" (whole answer in {self._keep_answer(script, result)})" if shown != error else ""
            if answer.get("user"):
                raise RemoteError(f"{self.name}: {shown}{more}")
            last = answer.get("traceback", "").strip().splitlines()
            where = next((ln.strip() for ln in reversed(last) if ln.strip().startswith("File")), "")
            raise RemoteError(f"{self.name}: remote step {script} failed: {answer.get('type')}: {shown} "
                              f"[{one_line(where)}]{more}")
        return answer["result"]

    def _keep_answer(self, step: str, result: CommandResult) -> Path:
        """Write a host's whole answer to a log file under artifacts/ (secrets masked); errors name it."""
        from sglops.core import artifacts

        folder = artifacts.artifacts_root() / artifacts.safe_name(self.name) / "remote-answers"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{artifacts.new_run_id()}-{artifacts.safe_name(os.path.basename(step))}.log"
        path.write_text(redact.text(
            f"host: {self.name}\nstep: {step}\nexit: {result.exit_code}\nseconds: {result.seconds:.3f}\n"
            f"stdout: {len(result.stdout)} characters\nstderr: {len(result.stderr)} characters\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}\n"
        ))
        return path

    # -- a container on the host (sglops/core/container.py) ----------------------------------------
    def _on_target(self, line: str) -> str:
        """The host shell line for `line`: itself, or wrapped into `docker exec` for a container target."""
        return self.container.wrap(line, self._container_identity) if self.container else line

    def _check_target(self, result: CommandResult) -> None:
        if not self.container:
            return
        if self._container_identity is None:
            from sglops.core.container import IDENTITY_MARKER, identity_from_stderr

            self._container_identity = identity_from_stderr(result.stderr)
            result.stderr = "".join(ln for ln in result.stderr.splitlines(keepends=True)
                                    if not ln.startswith(IDENTITY_MARKER))
        if result.exit_code != 0 and RESULT_MARKER not in result.stdout:
            self.container.explain(self.name, result.stderr, result.exit_code)

    def run_on_host(self, argv: Sequence[str], *, timeout: float = 60, check: bool = True) -> CommandResult:
        """Run argv on the host itself, outside any container (the engine's own commands: restart, logs)."""
        command = shell_command(argv, timeout=timeout)
        result = self._exec(command, None, timeout + KILL_GRACE_S + 5, None)
        if result.exit_code == 124:
            raise RemoteTimeout(f"{self.name}: `{shlex.join(argv)}` timed out after {timeout:g} s (stopped on the host)")
        if check and not result.ok:
            tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise RemoteError(f"{self.name}: `{redact.text(shlex.join(argv))}` exited {result.exit_code}: "
                              f"{redact.text(tail[0])}")
        return result

    def _container_put(self, local: str | os.PathLike, remote: str) -> None:
        """Upload through the exec stream (base64 on stdin), atomically renamed into place inside."""
        data = base64.b64encode(Path(local).read_bytes())
        script = 'mkdir -p "$(dirname "$1")" && base64 -d > "$1.sglops-tmp" && mv -f "$1.sglops-tmp" "$1"'
        self.run(["sh", "-c", script, "sh", remote], stdin=data, timeout=120 + len(data) / 5e6)

    def _container_get(self, remote: str, local: str | os.PathLike,
                       progress: Callable[[int, int], None] | None = None) -> None:
        """Download through the exec stream (base64 on stdout), written to a .part file and renamed."""
        result = self.run(["base64", remote], timeout=600)
        data = base64.b64decode(result.stdout)
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(local.name + ".part")
        tmp.write_bytes(data)
        os.replace(tmp, local)
        if progress:
            progress(len(data), len(data))

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


ONE_LINE_MAX = 400


def one_line(text: str, limit: int = ONE_LINE_MAX) -> str:
    """The first line of a host's text, cut to `limit` characters: an error line never carries a whole answer."""
    lines = text.strip().splitlines() or [""]
    first = lines[0].strip()
    if len(first) > limit:
        return first[:limit] + f"... ({len(text)} characters)"
    if len(lines) > 1:
        return first + f" ... (+{len(lines) - 1} lines)"
    return first


def _parse_answer(result: CommandResult) -> dict | None:
    idx = result.stdout.rfind(RESULT_MARKER)
    if idx < 0:
        return None
    try:
        return json.loads(result.stdout[idx + len(RESULT_MARKER) :].strip().splitlines()[0])
    except (ValueError, IndexError):
        return None


class LocalRemote(Remote):
    """`--host local`: the same commands and scripts, run on this machine without SSH."""

    def _exec(self, command, stdin, timeout, on_output):
        self.round_trips += 1
        start = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            if on_output is None:
                out, err = proc.communicate(stdin, timeout=timeout)
            else:
                out, err = _stream_local(proc, stdin, timeout, on_output)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            raise RemoteTimeout(f"local: command timed out after {timeout:g} s") from None
        return CommandResult(command, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                             time.monotonic() - start)

    def put(self, local, remote):
        if self.container:
            return self._container_put(local, remote)
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        tmp = f"{remote}.sglops-tmp"
        with open(local, "rb") as src, open(tmp, "wb") as dst:
            dst.write(src.read())
        os.replace(tmp, remote)

    def get(self, remote, local, progress=None):
        if self.container:
            return self._container_get(remote, local, progress)
        self.put(remote, str(local))


def _stream_local(proc: subprocess.Popen, stdin: bytes | None, timeout: float, on_output) -> tuple[bytes, bytes]:
    if stdin:
        proc.stdin.write(stdin)
    proc.stdin.close()
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    for line in iter(proc.stdout.readline, b""):
        out.append(line)
        on_output(line.decode(errors="replace"))
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
    err = proc.stderr.read()
    proc.wait(timeout=max(1, deadline - time.monotonic()))
    return b"".join(out), err


class SSHRemote(Remote):
    """A host over SSH: one Fabric connection per task, host keys verified against known_hosts."""

    def __init__(self, host: Host, *, accept_new_host_key: bool = False, inventory: Any = None) -> None:
        super().__init__(host)
        self.accept_new_host_key = accept_new_host_key
        self._inventory = inventory
        self._conn = None
        self._jumps: list[Any] = []  # the jump hosts' connections, first hop first

    # -- connection -----------------------------------------------------------------------
    def _connection(self):
        if self._conn is None:
            self._conn, self._jumps = _open_connection(self.host, self.accept_new_host_key, self._inventory)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            conns, self._conn, self._jumps = [*self._jumps, self._conn], None, []
            _close_all(conns)

    def _exec(self, command, stdin, timeout, on_output):
        from paramiko import SSHException  # loaded with the connection already

        conn = self._connection()
        self.round_trips += 1
        start = time.monotonic()
        try:
            chan = conn.client.get_transport().open_session(timeout=self.host.connect_timeout)
        except Exception as exc:  # transport died under us
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
            raise ConnectError(f"{self.name}: connection lost during a command: {exc or type(exc).__name__}") from None
        finally:
            chan.close()
        return CommandResult(command, code, out.decode(errors="replace"), err.decode(errors="replace"),
                             time.monotonic() - start)

    def put(self, local, remote):
        if self.container:
            return self._container_put(local, remote)
        sftp = self._connection().sftp()
        tmp = f"{remote}.sglops-tmp"
        try:
            sftp.put(os.fspath(local), tmp)
            sftp.posix_rename(tmp, remote)
        except OSError as exc:
            raise RemoteError(f"{self.name}: upload to {remote} failed: {exc}") from None

    def get(self, remote, local, progress=None):
        if self.container:
            return self._container_get(remote, local, progress)
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


# -- host keys ------------------------------------------------------------------------------
def fingerprint(key) -> str:
    """OpenSSH-style SHA256 fingerprint, the form `ssh-keygen -lf` shows."""
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_path(host: Host) -> Path:
    return Path(os.path.expanduser(host.known_hosts or os.environ.get("SGLOPS_KNOWN_HOSTS") or "~/.ssh/known_hosts"))


class _VerifyPolicy:
    """Unknown key: refuse with its fingerprint, or with --accept-new-host-key save it."""

    def __init__(self, path: Path, accept_new: bool, label: str) -> None:
        self.path, self.accept_new, self.label = path, accept_new, label

    def missing_host_key(self, client, hostname, key) -> None:
        fp = fingerprint(key)
        if not self.accept_new:
            raise HostKeyError(
                f"{self.label}: unknown host key for {hostname} ({key.get_name()} {fp}); "
                f"check it, then re-run with --accept-new-host-key to trust and save it in {self.path}"
            )
        from paramiko.hostkeys import HostKeyEntry

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(HostKeyEntry([hostname], key).to_line())
        client.get_host_keys().add(hostname, key.get_name(), key)




def _fabric_config():
    from fabric import Config

    path = ssh_config_path()
    try:
        return Config(runtime_ssh_path=path) if path else Config()
    except OSError as exc:
        raise ConfigError(f"cannot read the ssh_config {path or '~/.ssh/config'}: {exc.strerror or exc}") from None
    except Exception as exc:  # paramiko's parser: a bad line
        raise ConfigError(f"cannot parse the ssh_config {path or '~/.ssh/config'}: {exc}") from None


@dataclass
class _Hop:
    """One SSH connection on the way to a host: a jump host or the host itself."""

    conn: Any  # fabric.Connection, not opened yet
    label: str  # who errors name: "gpu-a" or "gpu-a (jump host bastion)"
    known_hosts: Path
    accept_new: bool
    timeout: float

    @property
    def where(self) -> str:
        return f"{self.conn.user}@{self.conn.host}:{self.conn.port}"


def _hops(host: Host, accept_new: bool, inventory: Any, config: Any, seen: tuple[str, ...] = ()) -> list[_Hop]:
    """Every connection from the first one TCP reaches to `host`, each with host key checks.

    Why not leave it to Fabric: for a ProxyJump from ssh_config it builds each jump host's connection
    with AutoAddPolicy and no known_hosts (any key accepted) and no timeouts. Here every hop gets the
    final host's policy (its known_hosts, --accept-new-host-key), as OpenSSH does; an inventory
    `gateway:` gets its own inventory entry's policy.
    """
    from fabric import Connection

    chain: list[_Hop] = []
    gateway = None
    if host.gateway:
        if inventory is None:
            raise ConnectError(f"{host.name}: gateway {host.gateway!r} needs an inventory")
        if host.gateway in seen or host.gateway == host.name:
            raise ConnectError(f"{host.name}: gateway loop: {' -> '.join((*seen, host.name, host.gateway))}")
        chain = _hops(inventory.get(host.gateway), accept_new, inventory, config, (*seen, host.name))
        gateway = chain[-1].conn
    connect_kwargs: dict[str, Any] = {"banner_timeout": host.connect_timeout, "auth_timeout": host.connect_timeout}
    if host.identity_file:
        connect_kwargs["key_filename"] = [os.path.expanduser(host.identity_file)]
    if host.password_env:
        secret = os.environ.get(host.password_env)
        if secret is None:
            raise ConnectError(f"{host.name}: password_env {host.password_env} is not set")
        redact.register(secret)
        connect_kwargs["password"] = secret
    conn = Connection(host.address, user=host.user, port=host.port, connect_timeout=host.connect_timeout,
                      connect_kwargs=connect_kwargs, gateway=gateway, config=config)
    path = known_hosts_path(host)
    if gateway is None:  # ProxyJump from ssh_config: Fabric built the jump hosts, last hop first
        jumps = []
        hop = conn.gateway
        while isinstance(hop, Connection):
            jumps.append(hop)
            hop = hop.gateway
        for jump in reversed(jumps):
            jump.connect_timeout = int(max(1, host.connect_timeout))
            jump.connect_kwargs.setdefault("banner_timeout", host.connect_timeout)
            jump.connect_kwargs.setdefault("auth_timeout", host.connect_timeout)
            chain.append(_Hop(jump, f"{host.name} (jump host {jump.original_host})", path, accept_new,
                              host.connect_timeout))
    chain.append(_Hop(conn, host.name, path, accept_new, host.connect_timeout))
    for hop in chain:
        client = hop.conn.client
        if hop.known_hosts.exists():
            client.load_host_keys(os.fspath(hop.known_hosts))
        client.set_missing_host_key_policy(_VerifyPolicy(hop.known_hosts, hop.accept_new, hop.label))
    return chain


def _open_connection(host: Host, accept_new: bool, inventory: Any) -> tuple[Any, list[Any]]:
    """The opened connection to `host` and its opened jump hosts (first hop first), or one error line.

    Each hop is opened here in turn, the next one over a direct-tcpip channel of the one before, so an
    error names the hop it came from; on any failure everything opened so far is closed again.
    """
    chain = _hops(host, accept_new, inventory, _fabric_config())
    tried: list[Any] = []
    sock = None
    try:
        for i, hop in enumerate(chain):
            conn = hop.conn
            tried.append(conn)
            if i > 0:
                sock = _tunnel(chain[i - 1], hop)
                conn.gateway = None  # the tunnel is open: Fabric must not open another one
                conn.connect_kwargs["sock"] = sock
            elif not isinstance(conn.gateway, str):  # a ProxyCommand (a string) makes its own socket
                sock = _tcp(hop)
                conn.connect_kwargs["sock"] = sock
            _open_hop(hop)
            sock = None
    except BaseException:
        _close_all(tried)  # a failed connect leaves paramiko's transport thread running: stop it first...
        if sock is not None:
            sock.close()  # ...then the socket it was reading (closing it under the thread makes it print EBADF)
        raise
    return tried[-1], tried[:-1]


def _close_all(conns: list[Any]) -> None:
    """Close connections, the host first and then its jump hosts (Fabric never closes a gateway)."""
    for conn in reversed(conns):
        _stop_transport(conn.client.get_transport())
        with contextlib.suppress(Exception):  # closing must reach every hop
            conn.close()
        conn.client.close()


def _stop_transport(transport: Any) -> None:
    """End paramiko's reader thread and let it close its own socket.

    Why: `Transport.close()` closes the socket while the thread may still be inside a read on it; the
    thread then prints "Socket exception: Bad file descriptor" to stderr (next to our one error line),
    and a read still in flight could land on the next socket given that descriptor number. A closed
    packetizer ends the thread at its next 0.1 s read poll; the thread then closes the socket itself.
    """
    if transport is None or not transport.is_alive() or transport is threading.current_thread():
        return
    transport.packetizer.close()
    transport.join(5)


def _tcp(hop: _Hop) -> socket.socket:
    try:
        sock = socket.create_connection((hop.conn.host, hop.conn.port), timeout=hop.timeout)
    except TimeoutError:
        raise ConnectError(f"{hop.label}: cannot reach {hop.where}: no answer within {hop.timeout:g} s") from None
    except OSError as exc:
        raise ConnectError(f"{hop.label}: cannot reach {hop.where}: {exc.strerror or exc}") from None
    # Small request/response packets: without TCP_NODELAY, Nagle + delayed ACKs add ~40 ms to a round trip.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _tunnel(via: _Hop, hop: _Hop):
    """A direct-tcpip channel from the jump host `via` to `hop` (what `ssh -J` does)."""
    import paramiko

    try:
        return via.conn.transport.open_channel("direct-tcpip", (hop.conn.host, int(hop.conn.port)), ("", 0),
                                               timeout=hop.timeout)
    except paramiko.ChannelException as exc:
        raise ConnectError(f"{hop.label}: jump host {via.conn.host} cannot reach {hop.where}: "
                           f"{exc.text or exc}") from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(f"{hop.label}: jump host {via.conn.host} cannot reach {hop.where}: "
                           f"{exc or type(exc).__name__}") from None


def _leave_rekeying_to_the_host(transport) -> None:
    """Never start a key re-exchange from this side; sshd starts them (its RekeyLimit) and paramiko answers.

    Why: a rekey paramiko starts itself (every 512 MB) deadlocks its transport thread if the host closes a
    channel before it answers (paramiko issue #822): 30 s later "Key-exchange timed out", connection dead.
    The hostile-network sandbox hits it within the first 1,000 answers of 1 MB. A rekey the host starts is
    safe: after its KEXINIT the host sends nothing else until the new keys are in use.
    """
    packetizer = transport.packetizer
    packetizer.REKEY_BYTES = packetizer.REKEY_PACKETS = 1 << 62


def _open_hop(hop: _Hop) -> None:
    import paramiko

    conn, where, label = hop.conn, hop.where, hop.label
    try:
        conn.open()
        transport = conn.client.get_transport()
        transport.set_keepalive(30)
        _leave_rekeying_to_the_host(transport)
    except HostKeyError:
        raise
    except paramiko.BadHostKeyException as exc:
        raise HostKeyError(
            f"{label}: host key for {where} CHANGED (now {exc.key.get_name()} {fingerprint(exc.key)}); "
            f"refusing to connect. If the host was reinstalled, remove its old line from {hop.known_hosts}"
        ) from None
    except paramiko.AuthenticationException as exc:
        raise ConnectError(f"{label}: authentication refused for {where}: {exc}") from None
    except TimeoutError:
        raise ConnectError(f"{label}: cannot reach {where}: no answer within {hop.timeout:g} s") from None
    except paramiko.ssh_exception.NoValidConnectionsError as exc:
        reason = next(iter(exc.errors.values()), exc)
        raise ConnectError(f"{label}: cannot reach {where}: {getattr(reason, 'strerror', None) or reason}") from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(f"{label}: cannot connect to {where}: {exc or type(exc).__name__}") from None


def connect(host: Host, *, accept_new_host_key: bool = False, inventory: Any = None) -> Remote:
    """A Remote for the host; SSH is opened lazily on first use and reused for the task."""
    if host.is_local:
        return LocalRemote(host)
    return SSHRemote(host, accept_new_host_key=accept_new_host_key, inventory=inventory)
