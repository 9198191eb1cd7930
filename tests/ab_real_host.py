"""The host and helpers of `inv ab`'s real-server proofs, shared by tests/test_ab_real.py (a perturbing patch,
a KV-dtype profile change, two runs of one profile) and tests/test_ab_real_interrupt.py (Ctrl-C on the real
server).

Why two modules: each real start of the tiny model costs 20-60 s of CPU, and the suite hands whole modules to
xdist workers; the one module of all four proofs was the suite's longest (696 s at load) and its critical
path. Each module has a host of its own, so the two run on two workers at once; every test and assertion is
the one they had in the one module.

The host's SGLang tree is a PRIVATE hard-linked copy of the server venv's site-packages/sglang (on PYTHONPATH
in the profile), so the test patch that perturbs the sampler never touches the tree other tests and servers
use: a patch replaces a file by rename, so the shared inode is never written. Few requests, short outputs, 1
round.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import REPO, inv_cmd, require_real_server_env

from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.launch import server as launch
from sglops.sandbox import sglang_cpu
from sglops.sandbox.sshd import Sandbox, free_port

PATCH = "perturb-logits-test"
BENCH = ["--input-len", "12", "--output-len", "12", "--requests", "2", "--warmup", "1"]


def private_tree(base: Path) -> Path:
    """site-packages/{sglang, its dist-info} hard-linked from the server venv: cheap, and safe to patch."""
    src = sglang_cpu.site_packages()
    site = base / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for name in ["sglang", *[p.name for p in src.glob("sglang-*.dist-info")]]:
        shutil.copytree(src / name, site / name, copy_function=os.link, symlinks=True)
    return site


def real_ab_host(tmp_path_factory, name: str) -> Iterator[tuple[Sandbox, dict, Path]]:
    """(sandbox, env, site): host cpu-a on a private tree, profiles cpu / cpu-kv-bf16, the test patch (a
    module fixture's body: the server stopped and the host torn down after the module)."""
    require_real_server_env()
    base = tmp_path_factory.mktemp(name)
    site = private_tree(base / "tree")
    profiles = base / "profiles"
    profiles.mkdir()
    doc = yaml.safe_load((REPO / "playbooks" / "profiles" / "sandbox-sglang-cpu.yaml").read_text())
    doc.update(port=free_port(), per_host={})
    # cheaper starts
    doc["env"] = {**doc.get("env", {}), "PYTHONPATH": str(site), **sglang_cpu.start_env()}
    (profiles / "cpu.yaml").write_text(yaml.safe_dump(doc))
    (profiles / "cpu-kv-bf16.yaml").write_text(yaml.safe_dump({"extends": "cpu", "kv_cache_dtype": "bf16"}))
    patch_root = base / "patches"
    shutil.copytree(REPO / "tests" / "data" / "patches" / PATCH, patch_root / PATCH)
    sb = Sandbox(base / "hosts", [{"name": "cpu-a", "sglang_env": "cpu"}]).start()
    inv_doc = yaml.safe_load(Path(sb.inventory).read_text())
    for h in inv_doc["hosts"]:
        h["sglang_root"] = str(site / "sglang")
    inventory = base / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(inv_doc))
    env = {
        "SGLOPS_INVENTORY": str(inventory),
        "SGLOPS_PROFILES": str(profiles),
        "SGLOPS_PATCHES": str(patch_root),
        "SGLOPS_ARTIFACTS": str(base / "artifacts"),
        "COLUMNS": "200",
    }
    try:
        yield sb, env, site
    finally:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            inv = load_inventory(inventory)
            with connect(inv.get("cpu-a"), inventory=inv) as remote:
                launch.stop(remote, grace_s=15)
        sb.stop()


def run_ab(env: dict, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`inv ab --json` as a user runs it (a real server restarts take minutes on a busy machine)."""
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "ab", "--host", "cpu-a", *args, *BENCH, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=3000,
    )
    assert proc.stdout.strip().startswith("{"), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def why(proc: subprocess.CompletedProcess, doc: dict, env: dict) -> str:
    """A failed `inv ab --json`'s own account: its one-line error (it goes to the JSON, not stderr), the tail
    of the sandbox host's server log, and stderr's tail."""
    lines = [f"exit {proc.returncode}: {doc.get('error') or doc.get('verdict')}"]
    for log in sorted(Path(env["SGLOPS_ARTIFACTS"]).parent.glob("hosts/**/server.log"))[-1:]:
        lines.append(f"--- {log}:\n" + log.read_text(errors="replace")[-2000:])
    return "\n".join([*lines, proc.stderr[-3000:]])


def applied(env: dict) -> list[str]:
    """The patches the host ledger says are applied, through `inv patches` as a user reads it."""
    proc = inv_cmd("patches", "--host", "cpu-a", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return [p["patch"] for p in json.loads(proc.stdout)["patches"] if p["status"] == "applied"]
