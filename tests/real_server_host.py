"""The real-server launch tier's host and helpers, shared by tests/test_real_server.py (the workflow: render,
restart, status, stop, some crashes, rollback) and
tests/test_real_server_crashes.py (the other crash classes).

Why two modules: each start of the real server costs 20-60 s of CPU, and the suite hands whole modules to
xdist workers; one module of ~10 starts was the suite's critical path. Each module has a sandbox host of its
own, so the two run on two workers at once; every test and assertion is the same as in the one module they
came from. The host's python is the server venv's and its SGLang tree is the venv's pip-installed
site-packages/sglang; the profile is the repo's playbooks/profiles/sandbox-sglang-cpu.yaml. Needs the
environment scripts/setup.sh builds (`python -m sglops.sandbox.sglang_cpu`): without it these tests skip with
that reason, except on CI, where they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import REPO, require_real_server_env

from sglops.core.hosts import load_inventory
from sglops.core.remote import Remote, connect
from sglops.launch import server as launch
from sglops.sandbox import sglang_cpu
from sglops.sandbox.sshd import Sandbox, free_port

PROFILE = "sandbox-sglang-cpu"

# case: (class, profile changes, text the cause line shows)
CRASHES = {
    "unknown-backend": (
        "unknown_backend",
        {"attention_backend": None, "extra_args": ["--attention-backend", "bogus_attn"]},
        "invalid choice: 'bogus_attn'",
    ),
    "model-path-missing": (
        "model_missing",
        {"model_path": "/nonexistent/tiny-model"},
        "Repo id must be in the form",
    ),
    "bad-kv-cache-dtype": (
        "bad_argument",
        {"extra_args": ["--kv-cache-dtype", "fp9_e9m9"]},
        "invalid choice: 'fp9_e9m9'",
    ),
    # valid choices this CPU host cannot run; the scheduler fails and the launcher hangs until sglops stops it
    "flashinfer-on-cpu": ("unsupported", {"attention_backend": "flashinfer"}, "NameError"),
    "fp8-kv-without-amx": ("unsupported", {"kv_cache_dtype": "fp8_e4m3"}, "requires Intel AMX support"),
    "no-cpu-engine": ("import_error", {"env": {"SGLANG_USE_CPU_ENGINE": "0"}}, "No module named 'vllm'"),
}


def real_host(tmp_path_factory, name: str) -> Iterator[tuple[Sandbox, Remote]]:
    """(sandbox, remote): one sshd host whose SGLang is the real pip-installed 0.5.23, sglops pointed at it (a
    module fixture's body: the server stopped and the host torn down after the module)."""
    require_real_server_env()
    base = tmp_path_factory.mktemp(name)
    profiles = base / "profiles"
    profiles.mkdir()
    shutil.copy(REPO / "playbooks" / "profiles" / f"{PROFILE}.yaml", profiles)
    cheaper_starts(profiles / f"{PROFILE}.yaml")
    sb = Sandbox(base, [{"name": "cpu-a", "sglang_env": "cpu", "tags": ["sandbox", "cpu"]}]).start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGLOPS_INVENTORY", str(sb.inventory))
        mp.setenv("SGLOPS_ARTIFACTS", str(base / "artifacts"))
        mp.setenv("SGLOPS_PROFILES", str(profiles))
        inv = load_inventory(sb.inventory)
        try:
            with connect(inv.get("cpu-a"), inventory=inv) as remote:
                yield sb, remote
                launch.stop(remote, grace_s=15)
        finally:
            sb.stop()


def cheaper_starts(profile: Path) -> None:
    """The copied profile's env gets sglang_cpu.start_env() (SGLang skips importing the ~270 model modules the
    tiny Llama does not need: a start took 0.84x as long idle, 0.77x at load 7-10, tests/suite_start_cost.py);
    nothing else changes."""
    doc = yaml.safe_load(profile.read_text())
    doc["env"] = {**(doc.get("env") or {}), **sglang_cpu.start_env()}
    profile.write_text(yaml.safe_dump(doc))


def variant(name: str, **changes) -> str:
    """A profile beside the repo's real one (in SGLOPS_PROFILES)
    with some fields changed (None removes one)."""
    return variant_in(Path(os.environ["SGLOPS_PROFILES"]), name, **changes)


def variant_in(folder: Path, name: str, **changes) -> str:
    """A profile beside the real one in `folder` with some fields changed (None removes one)."""
    doc = yaml.safe_load((folder / f"{PROFILE}.yaml").read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    doc["per_host"] = {}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return name


def server_processes(pid: int) -> dict[int, str]:
    """{pid: name} of the server's process group and every
    descendant of pid, from /proc (no name matching)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                head, rest = (entry / "stat").read_text().rsplit(")", 1)
            except OSError:
                continue
            fields = rest.split()
            if fields[0] != "Z":
                stats[int(entry.name)] = (int(fields[1]), int(fields[2]), head.split("(", 1)[1])
    found, todo = set(), [pid]
    found |= {p for p, (_, pgid, _) in stats.items() if pgid == pid}
    while todo:
        p = todo.pop()
        kids = [c for c, (ppid, _, _) in stats.items() if ppid == p and c not in found]
        found |= set(kids) | ({p} if p in stats else set())
        todo += kids
    return {p: process_cmdline(p) or stats[p][2] for p in found if p in stats}


def process_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ").strip()
    except OSError:
        return ""


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def start_up_failure_is_named_and_leaves_nothing(remote: Remote, case: str) -> None:
    """A real start with CRASHES[case]'s profile dies, is named with its class and cause line, and no process
    of it is left (the body of the crash tests of both modules)."""
    cls, changes, cause = CRASHES[case]
    res = launch.restart(remote, variant(f"crash-{case}", **changes), port=free_port(), timeout=600)
    assert not res.ok and res.state == "died", res.log_tail
    assert res.failure == cls and cause in (res.failure_detail or ""), (res.failure, res.failure_detail)
    assert res.hint and cause in res.failure_line()
    print(f"\n{case}: {cls} after {res.waited_s:.1f}s: {res.failure_detail}")
    assert not server_processes(res.pid) and not launch.status(remote).running


# Which module runs which crash class: the workflow module runs some between its stop and its rollback (so the
# rollback still follows failed starts), the crash module the rest; together every case once. Balanced by the
# seconds each took in the one module (2026-12-03, serial, load 8-12): the workflow's own tests 376 s, port
# taken 194, flashinfer 133, fp8 107, no-cpu-engine 75, model-path 37, bad-kv 36, unknown-backend 13.
WORKFLOW_CRASHES = ("model-path-missing", "no-cpu-engine")
OTHER_CRASHES = ("bad-kv-cache-dtype", "flashinfer-on-cpu", "fp8-kv-without-amx", "unknown-backend")
