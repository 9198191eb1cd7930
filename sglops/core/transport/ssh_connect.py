"""SSH connect: the connection to a host and each jump host on the way, opened in turn, host keys verified.

Why a layer of our own over Fabric's `Connection`: Fabric handles ssh_config, auth and ProxyJump well, but
accepts any host key (also a jump host's), sets no timeouts on jump hosts, and never closes a gateway. Here we
keep Fabric for the connection, open every hop ourselves (the next over a direct-tcpip channel of the one
before) so an error names the hop it came from, and close every hop's reader thread on the way out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglops.core import redact
from sglops.core.errors import ConfigError, ConnectError, HostKeyError
from sglops.core.ssh_config import ssh_config_path
from sglops.core.transport.ssh_keys import (
    KnownHosts,
    VerifyPolicy,
    fingerprint,
    known_hosts_path,
    lookup_names,
    read_known_hosts,
)

if TYPE_CHECKING:
    from sglops.core.host import Host


def _quiet_paramiko() -> None:
    """Paramiko's transport thread reports a cut connection ("Error reading SSH protocol banner", then the
    traceback) on its logger; with no handler configured, logging's last resort prints that to stderr next
    to our one line. Every failure it logs also reaches us as an exception, so its log goes nowhere."""
    log = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
    log.propagate = False


_quiet_paramiko()


def _fabric_config():
    from fabric import Config

    path = ssh_config_path()
    try:
        return Config(runtime_ssh_path=path) if path else Config()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the ssh_config {path or '~/.ssh/config'}: {exc.strerror or exc}"
        ) from None
    # paramiko's parser: a bad line
    except Exception as exc:
        raise ConfigError(f"cannot parse the ssh_config {path or '~/.ssh/config'}: {exc}") from None


def _connection_class():
    """Fabric's Connection with OpenSSH's ProxyJump: every hop is used.

    Why: Fabric drops the whole ProxyJump when a hop's host equals the target's host ("we appear to be our
    own proxy"), so `ProxyJump user@ADDR:PORT` to a target at ADDR on another port was silently not used, nor
    its key checked. Here a hop is skipped only when it is the connection itself (same host and port: a
    `Host *` ProxyJump seen again from the jump host's own config), and a longer loop is one line.
    """
    from fabric import Connection

    class _Connection(Connection):
        # a class attribute, so Fabric's DataProxy keeps it a real attribute
        _via: tuple = ()

        def __init__(self, *args: Any, _via: tuple = (), **kwargs: Any) -> None:
            self._via = _via
            super().__init__(*args, **kwargs)

        def get_gateway(self):  # noqa: ANN202 - Fabric's
            jump = self.ssh_config.get("proxyjump")
            if not jump:
                return super().get_gateway()
            hops = [h.strip() for h in jump.split(",") if h.strip()]
            if hops == ["none"]:
                return None
            me = (self.host, int(self.port))
            if me in self._via:
                raise ConfigError(f"ProxyJump loop: {' -> '.join(f'{h}:{p}' for h, p in (*self._via, me))}")
            prev = None
            for hop in reversed(hops):
                spec = self.derive_shorthand(hop)
                looked = self.config.base_ssh_config.lookup(spec["host"])
                where = (looked.get("hostname", spec["host"]), int(spec["port"] or looked.get("port") or 22))
                # ourselves: `Host *` ProxyJump read again for the jump host itself
                if where == me:
                    return None
                kwargs: dict[str, Any] = {"config": self.config.clone(), "_via": (*self._via, me)}
                if prev is not None:
                    kwargs["gateway"] = prev
                prev = _Connection(hop, **kwargs)
            return prev

    return _Connection


@dataclass
class _Hop:
    """One SSH connection on the way to a host: a jump host or the host itself."""

    # fabric.Connection, not opened yet
    conn: Any
    # who errors name: "gpu-a" or "gpu-a (jump host bastion)"
    label: str
    known_hosts: Path
    accept_new: bool
    timeout: float
    known: KnownHosts | None = None

    @property
    def where(self) -> str:
        return f"{self.conn.user}@{self.conn.host}:{self.conn.port}"


def _hops(
    host: Host, accept_new: bool, inventory: Any, config: Any, seen: tuple[str, ...] = ()
) -> list[_Hop]:
    """Every connection from the first one TCP reaches to `host`, each with host key checks.

    Why not leave it to Fabric: for a ProxyJump from ssh_config it builds each jump host's connection
    with AutoAddPolicy and no known_hosts (any key accepted) and no timeouts. Here every hop gets the
    final host's policy (its known_hosts, --accept-new-host-key), as OpenSSH does; an inventory
    `gateway:` gets its own inventory entry's policy.
    """
    Connection = _connection_class()  # noqa: N806 - a class

    chain: list[_Hop] = []
    gateway = None
    if host.gateway:
        if inventory is None:
            raise ConnectError(f"{host.name}: gateway {host.gateway!r} needs an inventory")
        if host.gateway in seen or host.gateway == host.name:
            raise ConnectError(f"{host.name}: gateway loop: {' -> '.join((*seen, host.name, host.gateway))}")
        chain = _hops(inventory.get(host.gateway), accept_new, inventory, config, (*seen, host.name))
        gateway = chain[-1].conn
    conn = Connection(
        host.address,
        user=host.user,
        port=host.port,
        connect_timeout=host.connect_timeout,
        connect_kwargs=_connect_kwargs(host),
        gateway=gateway,
        config=config,
    )
    path = known_hosts_path(host)
    # ProxyJump from ssh_config: Fabric built the jump hosts
    if gateway is None:
        chain += _config_jumps(conn, host, path, accept_new)
    chain.append(_Hop(conn, host.name, path, accept_new, host.connect_timeout))
    for hop in chain:
        client = hop.conn.client
        hop.known = read_known_hosts(hop.known_hosts)
        hop.known.load_into(client.get_host_keys(), lookup_names(hop.conn.host, int(hop.conn.port)))
        client.set_missing_host_key_policy(
            VerifyPolicy(hop.known_hosts, hop.accept_new, hop.label, hop.known)
        )
    return chain


def _connect_kwargs(host: Host) -> dict[str, Any]:
    """Paramiko's connect arguments for `host`: its timeouts,
    identity file and password (masked in output)."""
    kwargs: dict[str, Any] = {"banner_timeout": host.connect_timeout, "auth_timeout": host.connect_timeout}
    if host.identity_file:
        kwargs["key_filename"] = [os.path.expanduser(host.identity_file)]
    if host.password_env:
        secret = os.environ.get(host.password_env)
        if secret is None:
            raise ConnectError(f"{host.name}: password_env {host.password_env} is not set")
        redact.register(secret)
        kwargs["password"] = secret
    return kwargs


def _config_jumps(conn: Any, host: Host, path: Path, accept_new: bool) -> list[_Hop]:
    """The jump hosts Fabric built from an ssh_config ProxyJump (last hop first there), first hop first, each
    with the final host's timeouts and host key policy."""
    from fabric import Connection

    jumps = []
    hop = conn.gateway
    while isinstance(hop, Connection):
        jumps.append(hop)
        hop = hop.gateway
    out = []
    for jump in reversed(jumps):
        jump.connect_timeout = int(max(1, host.connect_timeout))
        jump.connect_kwargs.setdefault("banner_timeout", host.connect_timeout)
        jump.connect_kwargs.setdefault("auth_timeout", host.connect_timeout)
        out.append(
            _Hop(
                jump, f"{host.name} (jump host {jump.original_host})", path, accept_new, host.connect_timeout
            )
        )
    return out


def open_connection(host: Host, accept_new: bool, inventory: Any) -> tuple[Any, list[Any]]:
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
                # the tunnel is open: Fabric must not open another one
                conn.gateway = None
                conn.connect_kwargs["sock"] = sock
            # a ProxyCommand (a string) makes its own socket
            elif not isinstance(conn.gateway, str):
                sock = _tcp(hop)
                conn.connect_kwargs["sock"] = sock
            _open_hop(hop)
            sock = None
    except BaseException:
        # a failed connect leaves paramiko's transport thread running: stop it first...
        close_all(tried)
        if sock is not None:
            # ...then the socket it was reading (closing it under the thread makes it print EBADF)
            sock.close()
        raise
    return tried[-1], tried[:-1]


def close_all(conns: list[Any]) -> None:
    """Close connections, the host first and then its jump hosts (Fabric never closes a gateway)."""
    for conn in reversed(conns):
        _stop_transport(conn.client.get_transport())
        # closing must reach every hop
        with contextlib.suppress(Exception):
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
        raise ConnectError(
            f"{hop.label}: cannot reach {hop.where}: no answer within {hop.timeout:g} s"
        ) from None
    except OSError as exc:
        raise ConnectError(f"{hop.label}: cannot reach {hop.where}: {exc.strerror or exc}") from None
    # a HostName from ssh_config the IDNA encoder refuses (`a..b`, a 64-char label)
    except UnicodeError as exc:
        why = str(exc.__cause__ or exc).split(": ")[-1].strip("()")
        raise ConfigError(
            f"{hop.label}: {str(hop.conn.host)[:60]!r} is not a valid host name ({why})"
        ) from None
    # Small request/response packets: without TCP_NODELAY, Nagle + delayed ACKs add ~40 ms to a round trip.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _tunnel(via: _Hop, hop: _Hop):
    """A direct-tcpip channel from the jump host `via` to `hop` (what `ssh -J` does)."""
    import paramiko

    try:
        return via.conn.transport.open_channel(
            "direct-tcpip", (hop.conn.host, int(hop.conn.port)), ("", 0), timeout=hop.timeout
        )
    except paramiko.ChannelException as exc:
        raise ConnectError(
            f"{hop.label}: jump host {via.conn.host} cannot reach {hop.where}: {exc.text or exc}"
        ) from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(
            f"{hop.label}: jump host {via.conn.host} cannot reach {hop.where}: {exc or type(exc).__name__}"
        ) from None


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
        line = hop.known.revoked_line(exc.hostname, exc.key) if hop.known else None
        # a known key of another type, and this one revoked
        if line is not None:
            raise HostKeyError(
                f"{label}: host key for {where} ({exc.key.get_name()} {fingerprint(exc.key)}) is "
                f"REVOKED ({hop.known_hosts}:{line}, @revoked); refusing to connect"
            ) from None
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
        raise ConnectError(
            f"{label}: cannot reach {where}: {getattr(reason, 'strerror', None) or reason}"
        ) from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(f"{label}: cannot connect to {where}: {exc or type(exc).__name__}") from None
