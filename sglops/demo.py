"""`inv demo`: the README's main job. A local sandbox GPU host (real sshd on loopback, a real
SGLang release tree, the stand-in server), the investigation run end to end, then torn down.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from sglops.console import console
from sglops.sandbox.sshd import Sandbox

DEMO_HOSTS = [{"name": "sandbox-1", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]}]


def run_demo(keep: bool = False) -> int:
    """Bring the sandbox up, run the investigation on it, tear it down; returns an exit code."""
    from sglops import facts
    from sglops.hosts import load_inventory
    from sglops.remote import connect

    base = Path(tempfile.mkdtemp(prefix="sglops-demo-"))
    sandbox = Sandbox(base, DEMO_HOSTS)
    console.rule("[bold]sglops demo[/]: a sandbox GPU host on loopback")
    with console.status("starting sandbox host (real sshd, sglang 0.5.23 from PyPI)..."):
        sandbox.start()
    os.environ["SGLOPS_INVENTORY"] = str(sandbox.inventory)
    try:
        inv = load_inventory(sandbox.inventory)
        with connect(inv.get("sandbox-1"), inventory=inv) as remote:
            console.print(facts.gather(remote).table())
        return 0
    finally:
        if keep:
            console.print(f"sandbox kept at {base} (SGLOPS_INVENTORY={sandbox.inventory})")
        else:
            sandbox.stop()
            shutil.rmtree(base, ignore_errors=True)
