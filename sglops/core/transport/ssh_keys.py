"""Host keys: never silently accepted. OpenSSH-style fingerprints, the known_hosts file, the unknown-key policy."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import TYPE_CHECKING

from sglops.core.errors import HostKeyError

if TYPE_CHECKING:
    from sglops.core.hosts import Host


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
