"""`inv demo`: the README's main job, in two parts, on local sandbox hosts (real sshd on loopback).

1. A REAL SGLang 0.5.23 server on CPU (sglops/sandbox/sglang_cpu.py): the `real-server` play drives it as an
   operator drives a GPU host: facts, a probe of its pip-installed tree, restart through a profile, bench on
   both APIs, profile and trace analysis. Every figure of this part is measured.
2. The GPU-shaped fp8-kv story, which no CPU can serve: the `fp8-kv-decode` play against a real SGLang release
   tree with a STAND-IN server. The stand-in's decode rate comes from a model it runs on the served tree's own
   decode KV code (sglops/sandbox/standin_kv_cost.py), so the comparison it yields is SET BY THE STAND-IN and
   is printed as such, never as a measurement.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rich.text import Text

from sglops.core.console import console, styled
from sglops.sandbox.sshd import Sandbox

REAL_HOSTS = [{"name": "cpu-1", "sglang_env": "cpu", "tags": ["sandbox", "cpu"]}]
STANDIN_HOSTS = [
    {"name": "sandbox-1", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]}
]
REAL_VARS = {
    "profile": "sandbox-sglang-cpu",
    "runs": 3,
    "input_len": 32,
    "output_len": 64,
    "profile_steps": 10,
}
STANDIN_VARS = {"profile": "sandbox-demo", "runs": 5, "output_len": 256}
STANDIN_NOTE = (
    "figures of part 2 are SET BY THE STAND-IN (its decode model run on the served tree's code), not measured"
)


def _play(sandbox: Sandbox, host: str, name: str, variables: dict):
    """Run one play on one sandbox host; stop the server it started; returns the play's result."""
    from sglops.core.hosts import load_inventory
    from sglops.core.remote import connect
    from sglops.launch import server as launch
    from sglops.play.run import run_play
    from sglops.play.spec import load_play
    from sglops.views.show import show

    play = load_play(name, variables)
    inv = load_inventory(sandbox.inventory)
    with connect(inv.get(host), inventory=inv) as remote:
        result = run_play(remote, play)
        show(result)
        try:
            launch.stop(remote)
        # the sandbox goes away anyway; say so, don't hide the play's outcome
        except Exception as exc:
            console.print(Text(f"could not stop the server on {host} cleanly: {exc}", style="yellow"))
    return result


def _start(hosts: list[dict], what: str) -> tuple[Sandbox, Path]:
    base = Path(tempfile.mkdtemp(prefix="sglops-demo-"))
    sandbox = Sandbox(base, hosts)
    with console.status(Text(f"starting {what} ...")):
        sandbox.start()
    os.environ["SGLOPS_INVENTORY"] = str(sandbox.inventory)
    return sandbox, base


def _done(sandbox: Sandbox, base: Path, keep: bool, kept: list[tuple[Path, Path]]) -> None:
    if keep:
        kept.append((base, sandbox.inventory))
        return
    sandbox.stop()
    shutil.rmtree(base, ignore_errors=True)


def _part(
    hosts: list[dict], host: str, play: str, variables: dict, keep: bool, kept: list[tuple[Path, Path]]
):
    """One part of the demo: its own sandbox, one play on
    its host, the report; the sandbox torn down after."""
    from sglops.sandbox.sshd import free_port
    from sglops.views.report import write_report

    sandbox, base = _start(hosts, f"sandbox host {host}")
    try:
        result = _play(sandbox, host, play, {**variables, "port": free_port()})
        console.print(f"report: {write_report(result.run_id)}")
        return result
    finally:
        _done(sandbox, base, keep, kept)


def run_demo(keep: bool = False) -> int:
    """Both parts, each on its own sandbox, torn down after; returns an exit code."""
    kept: list[tuple[Path, Path]] = []
    console.print(
        styled(
            ("sglops demo, part 1", "bold"),
            ": a real SGLang 0.5.23 server (CPU, tiny random Llama) on sandbox host cpu-1, driven end to end",
        )
    )
    first = _part(REAL_HOSTS, "cpu-1", "real-server", REAL_VARS, keep, kept)
    if not first.ok:
        return 1
    console.print(
        styled(
            ("sglops demo, part 2", "bold"),
            ": the fp8-kv-decode investigation on a GPU-shaped "
            "sandbox host (a real sglang 0.5.23 tree, FlashInfer 0.7.2, a stand-in nvidia-smi (8x RTX "
            "PRO 6000 Blackwell, SM120) and a STAND-IN server, x20 for a quick demo)",
        )
    )
    second = _part(STANDIN_HOSTS, "sandbox-1", "fp8-kv-decode", STANDIN_VARS, keep, kept)
    for folder, inventory in kept:
        console.print(f"sandbox kept at {folder} (export SGLOPS_INVENTORY={inventory})")
    if not second.ok:
        return 1
    bench = next(s for s in first.steps if s.id == "bench")
    compare = next(s for s in second.steps if s.do == "compare")
    console.print(styled(("measured", "bold green"), f" (part 1, real SGLang on CPU): {bench.summary}"))
    console.print(styled(("stand-in", "bold yellow"), f" (part 2): {compare.summary}; {STANDIN_NOTE}"))
    return 0
