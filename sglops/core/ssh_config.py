"""The user's ssh_config: which file (SGLOPS_SSH_CONFIG or the usual ones) and its host aliases (paramiko's
parser: only the transport imports paramiko).
"""

from __future__ import annotations

import os
from pathlib import Path


def ssh_config_path() -> str | None:
    """An ssh_config to read instead of ~/.ssh/config and /etc/ssh/ssh_config (like `ssh -F`), from
    SGLOPS_SSH_CONFIG; None reads the usual ones."""
    path = os.environ.get("SGLOPS_SSH_CONFIG")
    return os.path.expanduser(path) if path else None


def ssh_config_aliases() -> set[str]:
    """Host aliases the ssh_config names (patterns left out): `--host ALIAS` may use them."""
    # as remote.py reads
    path = Path(os.path.expanduser(os.environ.get("SGLOPS_SSH_CONFIG") or "~/.ssh/config"))
    if not path.exists():
        return set()
    import paramiko

    try:
        return {h for h in paramiko.SSHConfig.from_path(os.fspath(path)).get_hostnames() if "*" not in h}
    except Exception:
        return set()
