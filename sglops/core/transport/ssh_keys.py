"""Host keys: never silently accepted. OpenSSH-style
fingerprints, the known_hosts file, the unknown-key policy."""

from __future__ import annotations

import base64
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sglops.core.errors import ConfigError, HostKeyError

if TYPE_CHECKING:
    from sglops.core.host import Host


def fingerprint(key) -> str:
    """OpenSSH-style SHA256 fingerprint, the form `ssh-keygen -lf` shows."""
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_path(host: Host) -> Path:
    return Path(
        os.path.expanduser(host.known_hosts or os.environ.get("SGLOPS_KNOWN_HOSTS") or "~/.ssh/known_hosts")
    )


class KnownHosts:
    """A known_hosts file read as OpenSSH reads it: plain lines are trusted keys; `@revoked` lines name keys
    that are refused for the hosts they match (even when another line trusts them); `@cert-authority` lines
    trust a CA for host certificates, which sglops never uses, so they are skipped; a line that does not parse
    is skipped (as ssh does) rather than failing every host in the file."""

    def __init__(self, path: Path, data: bytes | None = None) -> None:
        from paramiko.hostkeys import HostKeyEntry

        self.path = path
        self.entries: list[HostKeyEntry] = []
        self.revoked: list[tuple[int, HostKeyEntry]] = []
        if data is None and not path.exists():
            return
        try:
            text = (path.read_bytes() if data is None else data).decode("utf-8")
        except IsADirectoryError:
            raise ConfigError(
                f"known_hosts {path} is a folder, not a file; point known_hosts at a file"
            ) from None
        except OSError as exc:
            raise ConfigError(f"cannot read known_hosts {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            line = exc.object[: exc.start].count(b"\n") + 1
            raise ConfigError(
                f"{path}:{line}: known_hosts is not UTF-8 text (byte 0x{exc.object[exc.start]:02x})"
            ) from None
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            marker = None
            if line.startswith("@"):
                marker, _, line = line.partition(" ")
                line = line.strip()
                # @cert-authority (no certificates here) or a marker ssh does not know
                if marker != "@revoked":
                    continue
            entry = _entry(line, lineno)
            if entry is None:
                continue
            if marker:
                self.revoked.append((lineno, entry))
            else:
                self.entries.append(entry)

    def revoked_line(self, hostname: str, key) -> int | None:
        """The line of an @revoked entry for this key and a host pattern hostname matches, else None."""
        for lineno, entry in self.revoked:
            if entry.key.asbytes() == key.asbytes() and _matches(hostname, entry.hostnames):
                return lineno
        return None

    def load_into(self, host_keys, names: tuple[str, ...] | None = None) -> None:  # noqa: ANN001 - paramiko.HostKeys
        """Add the trusted entries to a client's keys, leaving out any key that a revoked line names (for
        one of its hosts), so paramiko asks our policy about it instead of trusting it. `names`: only the
        entries for these names (paramiko looks a host's key up by `addr` or `[addr]:port`, plain or hashed,
        never by a wildcard): each add walks the keys added before, so a whole file of N hosts was N^2 work
        per connection."""
        for entry in self.entries:
            for name in entry.hostnames:
                if names is not None and not _named(name, names):
                    continue
                if not any(
                    r.key.asbytes() == entry.key.asbytes() and _matches(name, r.hostnames)
                    for _, r in self.revoked
                ):
                    host_keys.add(name, entry.key.get_name(), entry.key)


_read: dict[Path, tuple[bytes, KnownHosts]] = {}
_read_lock = threading.Lock()


def read_known_hosts(path: Path) -> KnownHosts:
    """KnownHosts(path), parsed once per process while the file holds the same bytes: every host of a fan-out
    checks its key against the same file (a key accepted on the way changes it, and it is parsed again).
    Reading it is cheap; parsing every line into a key for every host was the cost."""
    try:
        data = path.read_bytes()
    except OSError:
        # no file (nothing known), or one that cannot be read: its own error
        return KnownHosts(path)
    with _read_lock:
        kept = _read.get(path)
    if kept is not None and kept[0] == data:
        return kept[1]
    known = KnownHosts(path, data)
    with _read_lock:
        _read[path] = (data, known)
    return known


def lookup_names(address: str, port: int) -> tuple[str, ...]:
    """The names paramiko looks a host's key up by (`addr`
    on port 22, else `[addr]:port`): both, to be sure."""
    return (address, f"[{address}]:{port}")


def _named(name: str, names: tuple[str, ...]) -> bool:
    """Whether a known_hosts name (plain or hashed, |1|salt|hash) is one of names."""
    if not name.startswith("|1|"):
        return name in names
    from paramiko.hostkeys import HostKeys

    return any(HostKeys.hash_host(n, name) == name for n in names)


def _entry(line: str, lineno: int):  # noqa: ANN202 - paramiko.hostkeys.HostKeyEntry | None
    from paramiko.hostkeys import HostKeyEntry

    try:
        return HostKeyEntry.from_line(line, lineno)
    # InvalidHostKey, SSHException, ValueError from a damaged key: ssh skips the line too
    except Exception:
        return None


def _matches(hostname: str, patterns: list[str]) -> bool:
    """OpenSSH host pattern matching: hashed names (|1|salt|hash), `*`/`?` wildcards, `!negation`."""
    import re

    from paramiko.hostkeys import HostKeys

    hit = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if pattern.startswith("|1|"):
            ok = HostKeys.hash_host(hostname, pattern) == pattern
        else:
            # only * and ? are special (not fnmatch's [...]: `[127.0.0.1]:2222` is a literal name)
            rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower())
            ok = re.fullmatch(rx, hostname.lower()) is not None
        if ok and negated:
            return False
        hit = hit or ok
    return hit


class VerifyPolicy:
    """Unknown key: refuse with its fingerprint, or with
    --accept-new-host-key save it. A revoked key: refused."""

    def __init__(self, path: Path, accept_new: bool, label: str, known: KnownHosts | None = None) -> None:
        self.path, self.accept_new, self.label = path, accept_new, label
        self.known = known

    def missing_host_key(self, client, hostname, key) -> None:
        fp = fingerprint(key)
        line = self.known.revoked_line(hostname, key) if self.known else None
        if line is not None:
            raise HostKeyError(
                f"{self.label}: host key for {hostname} ({key.get_name()} {fp}) is REVOKED "
                f"({self.path}:{line}, @revoked); refusing to connect"
            )
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
