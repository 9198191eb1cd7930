"""ONE server over TWO sandbox hosts (TP=2 split over nnodes=2), driven as a deployment, against a REAL SGLang
0.5.23 (CPU engine); and the multi-rank crash classes, each produced for real.

Two sshd on loopback, each with its own home, play the two nodes; their node_rank comes from the inventory,
the profile is the repo's playbooks/profiles/sandbox-sglang-cpu-2node.yaml with free ports. What an operator
of a 2x8-GPU deployment demands at 3 a.m.: nodes that differ are refused before anything stops; the nodes
start together and are healthy only when every node is; a dead node makes the server unhealthy at once and is
named; a node that fails to start has every node stopped, with that node's class and line. Needs the
environment scripts/setup.sh builds; skips without it, except on CI, where it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from real_server_host import cheaper_starts, port_free, server_processes

from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.host import server_common
from sglops.launch import ranks
from sglops.launch import server as launch
from sglops.sandbox.sshd import Sandbox, free_port
from tests.conftest import REPO, require_real_server_env

pytestmark = pytest.mark.real_server
BASE = "sandbox-sglang-cpu"
NODES = ("cpu-n0", "cpu-n1")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two real-server sandbox hosts (node_rank 0 and 1),
    sglops pointed at them, the 2-node profile on free ports."""
    require_real_server_env()
    base = tmp_path_factory.mktemp("two-nodes")
    profiles = base / "profiles"
    profiles.mkdir()
    for name in (BASE, f"{BASE}-2node", f"{BASE}-tp2"):
        shutil.copy(REPO / "playbooks" / "profiles" / f"{name}.yaml", profiles)
    cheaper_starts(profiles / f"{BASE}.yaml")
    doc = yaml.safe_load((profiles / f"{BASE}-2node.yaml").read_text())
    doc["dist_init_addr"] = f"127.0.0.1:{free_port()}"
    doc["per_host"] = {n: {"port": free_port()} for n in NODES}
    (profiles / f"{BASE}-2node.yaml").write_text(yaml.safe_dump(doc))
    sb = Sandbox(
        base,
        [
            {"name": n, "sglang_env": "cpu", "tags": ["sandbox", "cpu", "two-nodes"], "node_rank": i}
            for i, n in enumerate(NODES)
        ],
    ).start()
    env = {
        "SGLOPS_INVENTORY": str(sb.inventory),
        "SGLOPS_ARTIFACTS": str(base / "artifacts"),
        "SGLOPS_PROFILES": str(profiles),
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    inv = load_inventory(sb.inventory)
    try:
        yield {
            "sb": sb,
            "inv": inv,
            "profiles": profiles,
            "ports": {n: doc["per_host"][n]["port"] for n in NODES},
        }
        subprocess.run(
            [sys.executable, "-m", "invoke", "stop", "--hosts", ",".join(NODES)],
            cwd=REPO,
            capture_output=True,
            timeout=300,
        )
    finally:
        sb.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def inv(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def by_host(out: str) -> dict[str, dict]:
    doc = json.loads(out)
    return {d["host"]: d for d in (doc if isinstance(doc, list) else [doc])}


def node_status(pair, name):
    with connect(pair["inv"].get(name), inventory=pair["inv"]) as remote:
        return launch.status(remote)


def left_on(pair, name, server_id) -> list[int]:
    return server_common.marked_processes(server_id) if server_id else []


def test_nodes_that_differ_are_refused_before_anything_is_stopped(pair):
    doc = yaml.safe_load((pair["profiles"] / f"{BASE}-2node.yaml").read_text())
    doc["per_host"]["cpu-n1"]["model_path"] = "/nonexistent/tiny-model"
    (pair["profiles"] / "differ-2node.yaml").write_text(yaml.safe_dump(doc))
    r = inv("restart", "differ-2node", "--hosts", ",".join(NODES))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "the nodes of differ-2node differ; nothing was stopped or started: model path:" in r.stderr
    assert "/nonexistent/tiny-model is not a folder on cpu-n1" in r.stderr
    r = inv("restart", f"{BASE}-2node", "--host", "cpu-n1")
    assert r.returncode == 2 and "one server over nnodes=2: restart its nodes together" in r.stderr


def test_two_nodes_come_up_as_one_server_and_every_node_is_checked(pair):
    t0 = time.monotonic()
    r = inv("restart", f"{BASE}-2node", "--hosts", ",".join(NODES), "--json")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = by_host(r.stdout)
    assert [out[n]["state"] for n in NODES] == ["healthy", "healthy"]
    assert [out[n]["node_rank"] for n in NODES] == [0, 1]
    assert {o["host"]: o["state"] for o in out["cpu-n0"]["deployment"]} == {n: "healthy" for n in NODES}
    # a health port only
    assert out["cpu-n0"]["server_info"]["nnodes"] == 2 and out["cpu-n1"]["server_info"] is None
    print(
        f"\ntwo-node restart-to-healthy {max(out[n]['waited_s'] for n in NODES):.1f}s ({took:.1f}s for the "
        f"command), load {os.getloadavg()[0]:.1f}"
    )
    r = inv("server-status", "--hosts", ",".join(NODES), "--json")
    assert r.returncode == 0, r.stderr
    st = by_host(r.stdout)
    assert st["cpu-n0"]["deployment_healthy"] is True and st["cpu-n1"]["deployment_healthy"] is True
    assert [p.get("tp") for p in st["cpu-n0"]["processes"] if p["role"] == "scheduler"] == [0]
    assert [p.get("tp") for p in st["cpu-n1"]["processes"] if p["role"] == "scheduler"] == [1]
    import urllib.request

    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{pair['ports']['cpu-n0']}/generate", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert json.loads(resp.read())["meta_info"]["completion_tokens"] == 4
    r = inv("logs", "--hosts", ",".join(NODES), "--lines", "3000", "--json")
    logs = by_host(r.stdout)
    assert any(" TP0]" in ln for ln in logs["cpu-n0"]["lines"]) and any(
        " TP1]" in ln for ln in logs["cpu-n1"]["lines"]
    )


def test_a_profile_of_the_two_node_server_pulls_each_ranks_trace_from_its_own_node(pair):
    t0 = time.monotonic()
    r = inv("profile", "--hosts", ",".join(NODES), "--steps", "4", "--output-len", "8", "--json")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = by_host(r.stdout)
    mine = {n: [os.path.basename(t) for t in out[n]["traces"]] for n in NODES}
    assert [name.split("-TP-")[1] for name in mine["cpu-n0"]] == ["0.trace.json.gz"]
    assert [name.split("-TP-")[1] for name in mine["cpu-n1"]] == ["1.trace.json.gz"]
    assert out["cpu-n1"]["port_from"] == "node 0 of the server"
    # node 0's analysis covers every rank of the server
    a = out["cpu-n0"]["analysis"]
    assert [f["rank"] for f in a["files"]] == [0, 1] and a["across_ranks"]["slowest_rank"] in (0, 1)
    assert [f["rank"] for f in out["cpu-n1"]["analysis"]["files"]] == [1]
    sizes = {os.path.basename(t): os.path.getsize(t) for n in NODES for t in out[n]["traces"]}
    print(f"\ntwo-node profile in {took:.1f}s: {sizes}; across ranks {a['across_ranks']}")


def test_a_dead_node_is_named_at_once_and_takes_node_0_down(pair):
    n0, n1 = node_status(pair, "cpu-n0"), node_status(pair, "cpu-n1")
    assert n0.running and n1.running, "the two-node server of the test before is gone"
    # node 1's machine is gone: no clean shutdown
    os.killpg(n1.pid, signal.SIGKILL)
    t_dead = time.monotonic()
    for _ in range(100):
        if not server_processes(n1.pid):
            break
        time.sleep(0.1)
    r = inv("server-status", "--hosts", ",".join(NODES))
    reported = time.monotonic() - t_dead
    assert r.returncode != 0, r.stdout
    assert (
        "the server over 2 nodes is not healthy: " in r.stderr
        and "cpu-n1 (node_rank 1): not running" in r.stderr
    )
    print(f"\nnode 1 killed -> `inv server-status` names it after {reported:.1f}s")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and node_status(pair, "cpu-n0").health == 200:
        time.sleep(1)
    gone = time.monotonic() - t_dead
    log = Path(n0.log_path).read_text(errors="replace").splitlines()
    cls, label, line = server_common.classify(log[-400:])
    print(f"node 0 stopped answering {gone:.1f}s after node 1 died: {cls}: {line}")
    assert cls == "peer_lost", (cls, line, log[-30:])
    inv("stop", "--hosts", ",".join(NODES), timeout=300)


def test_an_ab_on_the_two_node_server_restarts_both_nodes_each_round_and_leaves_them_as_found(pair):
    """`inv ab --hosts n0,n1`: each side's restart starts both nodes together, node 0 serves the bench, and
    the restore leaves the nodes as found (here: no server, as the test before left them)."""
    (pair["profiles"] / "ab-b-2node.yaml").write_text(
        yaml.safe_dump({"extends": f"{BASE}-2node", "max_running_requests": 4})
    )
    for n in NODES:
        assert not node_status(pair, n).running
    t0 = time.monotonic()
    r = inv(
        "ab",
        "--hosts",
        ",".join(NODES),
        "-a",
        f"{BASE}-2node",
        "-b",
        "ab-b-2node",
        "--rounds",
        "1",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--variable",
        "max_running_requests",
        "--json",
    )
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(r.stdout)[0]
    assert [n["host"] for n in doc["nodes"]] == list(NODES)
    assert [(x["side"], x["status"]) for x in doc["rounds"]] == [("A", "ok"), ("B", "ok")]
    assert all(x["decode_tok_s"] > 0 for x in doc["rounds"])
    assert doc["restore"]["ok"] and doc["restore"]["server"] == "stopped (none was running before)"
    for n in NODES:
        st = node_status(pair, n)
        assert not st.running and not st.processes and len(st.restarts) >= 2
    print(
        f"\nab over two nodes (1 round: 2 two-node restarts, 2 benches, the restore): {took:.1f}s; restarts"
        f" {[x['restart_s'] for x in doc['rounds']]} s; decode tok/s"
        f" {[x['decode_tok_s'] for x in doc['rounds']]}; load {os.getloadavg()[0]:.1f}"
    )


def test_a_node_that_fails_to_start_has_every_node_stopped_and_named(pair):
    """Node 1's port is taken by a process sglops did not start: node 1 refuses at once, node 0 (already
    starting) is aborted and stopped; the report names cpu-n1, its class and its line, and nothing is left."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", pair["ports"]["cpu-n1"]))
    holder.listen(1)
    try:
        t0 = time.monotonic()
        r = inv("restart", f"{BASE}-2node", "--hosts", ",".join(NODES), "--json")
        took = time.monotonic() - t0
    finally:
        holder.close()
    assert r.returncode != 0
    lines = {n: d["error"] for n, d in by_host(r.stdout).items()}
    assert "(port_in_use)" in lines["cpu-n1"] and "is already in use" in lines["cpu-n1"]
    assert "(aborted)" in lines["cpu-n0"] and "node cpu-n1 (node_rank 1)" in lines["cpu-n0"]
    assert "[port_in_use]" in lines["cpu-n0"] and "every node was stopped" in lines["cpu-n0"]
    rec = json.loads(Path(re.search(r"record (\S+restart\.json)", lines["cpu-n0"]).group(1)).read_text())
    rec = rec.get("result", rec)
    assert {n["host"]: n["state"] for n in rec["deployment"]} == {"cpu-n0": "aborted", "cpu-n1": "died"}
    print(
        f"\nnode 1 refused (port taken): every node stopped and reported in {took:.1f}s "
        f"(node 0 stopped {rec['stop'].get('reported_after_failure_s')}s after node 1 failed)"
    )
    for n in NODES:
        st = node_status(pair, n)
        assert not st.running and not [p for p in st.processes]
    assert port_free(pair["ports"]["cpu-n0"])


# -- the multi-rank crash classes, produced for real (one host, TP=2)
# ---------------------------------------------
@pytest.mark.parametrize(
    ("case", "env", "cls", "cause"),
    [
        (
            "thread-binding-left-to-sglang",
            {ranks.BIND_VAR: "all"},
            "thread_binding",
            "SGLANG_CPU_OMP_THREADS_BIND is not set",
        ),
        (
            "the-cuda-builds-nccl",
            {ranks.NCCL_VAR: "<libnccl>"},
            "nccl_on_cpu",
            "Expected a cuda device, but got: cpu",
        ),
    ],
)
def test_a_multi_rank_start_that_cannot_run_here_is_named(pair, case, env, cls, cause):
    from sglops.sandbox import sglang_cpu

    lib = next(sglang_cpu.site_packages().glob("nvidia/nccl/lib/libnccl.so*"))
    doc = yaml.safe_load((pair["profiles"] / f"{BASE}-tp2.yaml").read_text())
    doc["env"] = {k: str(lib) if v == "<libnccl>" else v for k, v in env.items()}
    doc["per_host"] = {}
    (pair["profiles"] / f"crash-{case}.yaml").write_text(yaml.safe_dump(doc))
    with connect(pair["inv"].get("cpu-n0"), inventory=pair["inv"]) as remote:
        res = launch.restart(remote, f"crash-{case}", port=free_port(), timeout=600)
        assert not res.ok and res.state == "died", res.log_tail[-20:]
        assert res.failure == cls and cause in (res.failure_detail or ""), (res.failure, res.failure_detail)
        print(f"\n{case}: {cls} after {res.waited_s:.1f}s: {res.failure_detail}")
        assert not server_processes(res.pid) and not launch.status(remote).running
