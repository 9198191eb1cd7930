"""TP=2 on ONE sandbox host, through the ordinary commands, against a REAL SGLang 0.5.23 server (CPU engine).

The profile is the repo's playbooks/profiles/sandbox-sglang-cpu-tp2.yaml: nothing in it (or here) names the
variables a CPU host needs for two ranks; render derives them from the host's facts (sglops/launch/ranks.py).
One TP=2 server for the module (a start takes ~1-2 minutes on 2 cores): render, restart, server-status with
every rank's process, logs of every rank, a per-rank profile, stop (nothing left by group or by mark),
rollback. Needs the environment scripts/setup.sh builds; skips without it, except on CI, where it fails.
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import time
from pathlib import Path

import pytest
from real_server_host import port_free, real_host, server_processes

from sglops.host import server_common
from sglops.launch import ranks
from sglops.launch import server as launch
from sglops.sandbox.sshd import free_port
from tests.conftest import REPO, inv_cmd

pytestmark = pytest.mark.real_server
TP2 = "sandbox-sglang-cpu-tp2"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(sandbox, remote): the real-server sandbox host, with the TP=2 profile beside the one it extends."""
    gen = real_host(tmp_path_factory, "tp2")
    sb, remote = next(gen)
    shutil.copy(REPO / "playbooks" / "profiles" / f"{TP2}.yaml", Path(os.environ["SGLOPS_PROFILES"]))
    yield sb, remote
    next(gen, None)


def test_render_derives_the_thread_binding_and_the_nccl_fallback_from_the_hosts_facts(real):
    r = inv_cmd("render", TP2, "--host", "cpu-a", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    derived = {d["name"]: d["value"] for d in out["derived_env"]}
    assert derived[ranks.BIND_VAR] == ranks.cpu_groups(sorted(os.sched_getaffinity(0)), 2)
    # the venv's CUDA torch ships libnccl; this host has no GPU
    assert derived[ranks.NCCL_VAR] == ranks.NO_NCCL
    assert f"export {ranks.BIND_VAR}={shlex.quote(derived[ranks.BIND_VAR])}\n" in out["script"]
    assert "--tp-size 2" in out["script"]


def test_tp2_restarts_healthy_and_status_lists_every_ranks_process(real):
    sb, remote = real
    t0 = time.monotonic()
    res = launch.restart(remote, TP2, port=free_port())
    assert res.ok and res.state == "healthy", (res.failure_line(), res.log_tail[-20:])
    print(
        f"\nTP=2 restart-to-healthy {res.waited_s:.1f}s ({time.monotonic() - t0:.1f}s with the round trips)"
        f", load {os.getloadavg()[0]:.1f}"
    )
    assert res.server_info["tp_size"] == 2 and "tp_size" in res.confirmed
    r = inv_cmd("server-status", "--host", "cpu-a", "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    roles = sorted((p["role"], p.get("tp")) for p in st["processes"] if p["role"] != "bash")
    assert ("launcher", None) in roles and ("detokenizer", None) in roles
    assert [tp for role, tp in roles if role == "scheduler"] == [0, 1]
    r = inv_cmd("server-status", "--host", "cpu-a")
    assert "scheduler" in r.stdout and "TP1" in r.stdout


def test_logs_show_every_ranks_lines_and_one_ranks_alone(real):
    r = inv_cmd("logs", "--host", "cpu-a", "--lines", "2000")
    assert r.returncode == 0 and " TP0]" in r.stdout and " TP1]" in r.stdout
    r = inv_cmd("logs", "--host", "cpu-a", "--lines", "2000", "--rank", "1", "--json")
    lines = json.loads(r.stdout)["lines"]
    assert lines and all(" TP1]" in ln for ln in lines)


def test_a_profile_of_tp2_collects_and_analyses_each_ranks_trace(real, tmp_path):
    sb, remote = real
    st = launch.status(remote)
    t0 = time.monotonic()
    r = inv_cmd(
        "profile", "--host", "cpu-a", "--port", str(st.port), "--steps", "4", "--output-len", "8", "--json"
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads(r.stdout)
    names = sorted(os.path.basename(t) for t in doc["traces"])
    assert names == [f"sglops-{doc['profile_id']}-TP-{i}.trace.json.gz" for i in (0, 1)]
    sizes = {os.path.basename(t): os.path.getsize(t) for t in doc["traces"]}
    for t in doc["traces"]:
        assert json.loads(gzip.decompress(Path(t).read_bytes()))["traceEvents"]
    a = doc["analysis"]
    assert [f["rank"] for f in a["files"]] == [0, 1]
    x = a["across_ranks"]
    assert [r["rank"] for r in x["ranks"]] == [0, 1] and all(r["busy_us"] > 0 for r in x["ranks"])
    # TP=2 all-reduces over gloo every layer
    assert any(r["collective_us"] > 0 for r in x["ranks"]), x
    assert x["slowest_rank"] in (0, 1) and 0 <= x["spread"] < 1
    print(f"\nTP=2 profile: {sizes} bytes, {time.monotonic() - t0:.1f}s in all")


def test_stop_leaves_no_process_by_group_or_by_mark(real):
    sb, remote = real
    st = launch.status(remote)
    assert st.running, "the TP=2 server of the restart test is gone"
    server_id = json.loads((Path(st.log_path).parent / "server.json").read_text())["server_id"]
    before = server_processes(st.pid)
    # launcher, two schedulers, detokenizer
    assert len(before) >= 4
    t0 = time.monotonic()
    out = launch.stop(remote, grace_s=15)
    print(f"\nTP=2 stop {time.monotonic() - t0:.1f}s: {out['processes']} processes, left {out['left']}")
    assert out["stopped"] and out["left"] == []
    assert not server_processes(st.pid) and not server_common.marked_processes(server_id)
    assert not [
        p
        for p in before
        if Path(f"/proc/{p}").exists()
        and server_common.start_ticks(p) is not None
        and server_common.process_role(server_common.process_cmdline(p))[0] != "other"
    ]
    assert port_free(st.port) and not launch.status(remote).running


def test_rollback_brings_back_the_tp2_server(real):
    sb, remote = real
    r = inv_cmd("rollback", "--host", "cpu-a", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    st = launch.status(remote)
    assert st.running and st.health == 200 and st.profile == TP2
    assert sorted(p.get("tp") for p in st.processes if p["role"] == "scheduler") == [0, 1]
    launch.stop(remote, grace_s=15)
