"""`inv demo`: the README's main job. A local sandbox GPU host (real sshd on loopback, a real
SGLang release tree, the stand-in server), the fp8-kv-decode play run end to end on it, the
comparison and report printed, then the sandbox torn down.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rich.text import Text

from sglops.console import console, styled
from sglops.sandbox.sshd import Sandbox

DEMO_HOSTS = [{"name": "sandbox-1", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]}]
DEMO_VARS = {"profile": "sandbox-demo", "runs": 5, "output_len": 256}


def run_demo(keep: bool = False) -> int:
    """Bring the sandbox up, run the play on it, tear it down; returns an exit code."""
    from sglops.hosts import load_inventory
    from sglops.play import run_play
    from sglops.play_spec import load_play
    from sglops.remote import connect
    from sglops.report import write_report
    from sglops.sandbox.sshd import free_port

    play = load_play("fp8-kv-decode", {**DEMO_VARS, "port": free_port()})
    base = Path(tempfile.mkdtemp(prefix="sglops-demo-"))
    sandbox = Sandbox(base, DEMO_HOSTS)
    console.print(styled(("sglops demo", "bold"), ": the fp8-kv-decode investigation on a sandbox GPU host"))
    console.print("sandbox-1: real sshd on 127.0.0.1, a real sglang 0.5.23 tree from PyPI, FlashInfer 0.7.2, a stand-in "
                  "nvidia-smi (8x RTX PRO 6000 Blackwell, SM120) and a stand-in SGLang server whose decode rate follows "
                  "the tree it serves (x20 for a quick demo)")
    with console.status(Text("starting the sandbox host ...")):
        sandbox.start()
    os.environ["SGLOPS_INVENTORY"] = str(sandbox.inventory)
    try:
        inv = load_inventory(sandbox.inventory)
        with connect(inv.get("sandbox-1"), inventory=inv) as remote:
            result = run_play(remote, play)
            console.print(result.table())
            try:
                from sglops import launch

                launch.stop(remote)
            except Exception as exc:  # the sandbox goes away anyway; say so, don't hide the play's outcome
                console.print(Text(f"could not stop the stand-in server cleanly: {exc}", style="yellow"))
        report = write_report(result.run_id)
        console.print(f"report: {report}")
        if not result.ok:
            return 1
        compare = next(s for s in result.steps if s.do == "compare")
        console.print(styled(("result", "bold green"), f": {compare.summary}"))
        return 0
    finally:
        if keep:
            console.print(f"sandbox kept at {base} (export SGLOPS_INVENTORY={sandbox.inventory})")
        else:
            sandbox.stop()
            shutil.rmtree(base, ignore_errors=True)
