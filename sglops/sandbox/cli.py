"""`inv sandbox up|down|status`: long-lived sandbox hosts for the demo and for trying sglops by hand."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from sglops.core import paths
from sglops.core.console import console
from sglops.core.errors import ConfigError
from sglops.sandbox.sshd import Sandbox

DEFAULT_HOSTS = [
    {"name": "sandbox-1", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]},
    {"name": "sandbox-2", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]},
    {"name": "sandbox-3", "sglang": "0.5.15", "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]},
    {"name": "sandbox-4", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]},
]
# With --real: a host with the REAL SGLang 0.5.23 CPU server environment (profile sandbox-sglang-cpu).
REAL_HOST = {"name": "cpu-a", "sglang_env": "cpu", "tags": ["sandbox", "cpu"]}


def default_base() -> Path:
    return Path(os.environ.get("SGLOPS_SANDBOX") or paths.cache("sandbox"))


def down(base: Path) -> int:
    stopped = 0
    for pidfile in base.glob("*/sshd.pid"):
        try:
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)
            stopped += 1
        except (ProcessLookupError, ValueError):
            pass
        pidfile.unlink(missing_ok=True)
    servers = [*base.glob("*/sglang/.sglops/server.pid"), *base.glob("*/.local/state/sglops/*/server.pid")]
    # checkouts keep state in the tree, installed trees (sglang_env) in the host's HOME
    for pidfile in servers:
        try:
            os.killpg(int(pidfile.read_text().split()[0]), signal.SIGTERM)
        except (ProcessLookupError, ValueError, PermissionError):
            pass
    return stopped


def main(action: str, hosts: int = 2, base: str | None = None, real: bool = False) -> None:
    root = Path(base) if base else default_base()
    if action == "up":
        if not 1 <= hosts <= len(DEFAULT_HOSTS):
            raise ConfigError(f"--hosts must be 1..{len(DEFAULT_HOSTS)}")
        down(root)
        sb = Sandbox(root, DEFAULT_HOSTS[:hosts] + ([REAL_HOST] if real else []))
        sb.start()
        (root / "sandbox.json").write_text(
            json.dumps({"inventory": str(sb.inventory), "hosts": [h.name for h in sb.hosts]})
        )
        console.print(
            "sandbox up:"
            f" {', '.join(f'{h.name} (127.0.0.1:{h.port}, sglang {h.sglang_version})' for h in sb.hosts)}"
        )
        console.print(f"use it with: export SGLOPS_INVENTORY={sb.inventory}")
        if real:
            console.print("real SGLang server: inv restart sandbox-sglang-cpu --host cpu-a")
    elif action == "down":
        console.print(f"sandbox down: stopped {down(root)} sshd")
    elif action == "status":
        state = root / "sandbox.json"
        if not state.exists():
            console.print("no sandbox (inv sandbox up)")
            return
        info = json.loads(state.read_text())
        alive = [p.parent.name for p in root.glob("*/sshd.pid")]
        console.print(f"inventory {info['inventory']}; running: {', '.join(alive) or 'none'}")
    else:
        raise ConfigError(f"unknown sandbox action {action!r}: use up, down or status")
