"""`inv ab` and `inv sweep` on the nodes of ONE server (inventory node_rank 0/1, `--hosts node0,node1`).

Two sandbox hosts, each a real sshd with its own SGLang 0.5.23 tree and ledger, serve one STAND-IN server with
nnodes=2 (its rates are set by the stand-in, 10x faster: these tests check the workflow, never a figure; the
same ab against a REAL two-node SGLang is in tests/test_multinode_real.py). What an operator of a 2x8-GPU
deployment demands of an experiment: every round restarts every node, a patch is on every node or none, each
node keeps a journal naming every node, and the restore (also after a SIGKILL, by the next ab or sweep) covers
every node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import REPO, inv_cmd, open_remote

from sglops.experiment import ab_journal
from sglops.launch import server as launch
from sglops.patch import apply as patches
from sglops.sandbox.sshd import free_port

NODES = ("node0", "node1")
FAST = {"SGLOPS_STANDIN_SPEEDUP": "10", "SGLOPS_STANDIN_STARTUP_S": "0.3"}


@pytest.fixture(scope="module")
def server(make_sandbox, tmp_path_factory):
    """(sandbox, env): two nodes of one stand-in server,
    profile `two` (nnodes 2, a port per node), serving."""
    sb = make_sandbox(
        [
            {
                "name": n,
                "sglang": "0.5.23",
                "flashinfer": "0.7.2",
                "node_rank": i,
                "tags": ["sandbox", "sm120"],
            }
            for i, n in enumerate(NODES)
        ],
        name="expnodes",
    )
    profiles = tmp_path_factory.mktemp("expnodes-profiles")
    doc = yaml.safe_load((REPO / "playbooks" / "profiles" / "sandbox.yaml").read_text())
    # the nodes must find the model at the same path (both: this machine)
    model = profiles / "GLM-5-NVFP4"
    model.mkdir()
    doc.update(
        nnodes=2,
        dist_init_addr=f"127.0.0.1:{free_port()}",
        model_path=str(model),
        per_host={n: {"port": free_port()} for n in NODES},
    )
    doc["env"] = {**doc.get("env", {}), **FAST}
    (profiles / "two.yaml").write_text(yaml.safe_dump(doc))
    (profiles / "two-1x.yaml").write_text(
        yaml.safe_dump({"extends": "two", "env": {"SGLOPS_STANDIN_SPEEDUP": "1"}})
    )
    env = {"SGLOPS_INVENTORY": str(sb.inventory), "SGLOPS_PROFILES": str(profiles)}
    yield sb, env
    for n in NODES:
        with open_remote(sb, n) as remote:
            launch.stop(remote)


@pytest.fixture
def env(server, tmp_path, monkeypatch):
    sb, base = server
    out = {**base, "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")}
    for k, v in out.items():
        monkeypatch.setenv(k, v)
    r = inv_cmd("restart", "two", "--hosts", ",".join(NODES), env=out)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def state(sb) -> dict[str, tuple]:
    """Each node: (ledger patches, server profile, pid, how many restarts its record has)."""
    out = {}
    for n in NODES:
        with open_remote(sb, n) as remote:
            st = launch.status(remote)
            out[n] = (
                [e["patch"] for e in patches.applied(remote)],
                st.profile if st.running else None,
                st.pid,
                len(st.restarts),
            )
    return out


def journals(sb) -> dict:
    out = {}
    for n in NODES:
        with open_remote(sb, n) as remote:
            out[n] = ab_journal.read(remote)
    return out


def test_an_ab_on_the_server_restarts_every_node_each_round_and_restores_both(server, env):
    sb, _ = server
    before = state(sb)
    r = inv_cmd(
        "ab",
        "--hosts",
        ",".join(NODES),
        "--patch",
        "gather-cast",
        "--rounds",
        "1",
        "--output-len",
        "16",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    docs = json.loads(r.stdout)
    doc = docs[0]
    # one ab: the server's
    assert len(docs) == 2 and docs[1]["run_id"] == doc["run_id"] and doc["host"] == "node0"
    assert doc["nodes"] == [{"host": "node0", "node_rank": 0}, {"host": "node1", "node_rank": 1}]
    assert [(x["side"], x["status"], x["patches"]) for x in doc["rounds"]] == [
        ("A", "ok", []),
        ("B", "ok", ["gather-cast"]),
    ]
    assert doc["restore"]["ok"] and doc["restore"]["ledgers"] == {"node0": [], "node1": []}
    after = state(sb)
    # A, B and the restore each restarted this node too: three restarts, a new server, no patch
    for n in NODES:
        assert after[n][0] == [] and after[n][1] == "two" and after[n][3] == before[n][3] + 3, (
            n,
            before,
            after,
        )
        assert after[n][2] != before[n][2]
    assert all(j is None for j in journals(sb).values())


def test_a_sigkilled_ab_leaves_a_journal_on_every_node_and_the_next_sweep_runs_on_both_and_restores_both(
    server, env
):
    sb, _ = server
    before = state(sb)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "invoke",
            "ab",
            "--hosts",
            ",".join(NODES),
            "-a",
            "two-1x",
            "-b",
            "two-1x+gather-cast",
            "--rounds",
            "2",
            "--output-len",
            "16",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )
    # round 1 B: both nodes patched, the patched server on both
    wait_patched_on_both(sb, proc, "two-1x")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    js = journals(sb)
    for n in NODES:
        j = js[n]
        assert j is not None and j.what == "ab" and j.found.profile == "two" and j.found.patches == []
        # each node's journal names every node
        assert [x["host"] for x in j.nodes] == list(NODES)
    r = inv_cmd("patches", "--hosts", ",".join(NODES), env={**env, "COLUMNS": "300"})
    assert f"ab {js['node0'].run_id} over nodes node0, node1 was cut short" in " ".join(r.stdout.split())
    r = inv_cmd(
        "sweep",
        "--hosts",
        ",".join(NODES),
        "--profile",
        "two",
        "--patches",
        "none,gather-cast",
        "--runs",
        "1",
        "--output-len",
        "8",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)[0]
    assert doc["earlier_line"].startswith(f"ab {js['node0'].run_id} over nodes node0, node1 was cut short")
    # each candidate started on every node (node 1's ledger was patched for the second one, as node 0's)
    assert [(x["candidate"]["label"], x["status"]) for x in doc["rows"]] == [
        ("base profile", "started"),
        ("base profile+gather-cast", "started"),
    ]
    assert doc["nodes"][1] == {"host": "node1", "node_rank": 1}
    assert doc["restore"]["ok"] and doc["restore"]["ledgers"] == {"node0": [], "node1": []}
    after = state(sb)
    assert [after[n][:2] for n in NODES] == [([], "two"), ([], "two")] and [before[n][:2] for n in NODES] == [
        ([], "two"),
        ([], "two"),
    ]
    assert all(j is None for j in journals(sb).values())


def wait_patched_on_both(sb, proc, profile: str) -> None:
    deadline = time.monotonic() + 180
    while True:
        assert time.monotonic() < deadline and proc.poll() is None, (
            "the ab ended before both nodes were patched"
        )
        now = state(sb)
        if all(now[n][0] == ["gather-cast"] and now[n][1] == profile for n in NODES):
            return
        time.sleep(0.3)


def test_ctrl_c_stops_the_rounds_on_every_node_and_restores_both(server, env):
    """The rounds run in a worker thread (one per node): the main thread forwards Ctrl-C to them, the ab stops
    after the step in progress and the restore puts both nodes back; 130, one line."""
    sb, _ = server
    before = state(sb)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "invoke",
            "ab",
            "--hosts",
            ",".join(NODES),
            "-a",
            "two",
            "-b",
            "two+gather-cast",
            "--rounds",
            "3",
            "--output-len",
            "16",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    wait_patched_on_both(sb, proc, "two")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 130 and "Traceback" not in err, (out[-2000:], err[-3000:])
    assert "interrupted by SIGINT" in out + err
    after = state(sb)
    assert [after[n][:2] for n in NODES] == [before[n][:2] for n in NODES] == [([], "two"), ([], "two")]
    assert all(j is None for j in journals(sb).values())


def test_hosts_that_are_not_one_server_are_refused_in_one_line(server, env, make_sandbox):
    r = inv_cmd("ab", "--host", "node0", "--patch", "gather-cast", "--dry-run", env=env)
    # one node alone: refused before anything changes
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (
        "profile two is one server over nnodes=2: run the ab on its nodes together (--hosts node0,...)"
        in r.stderr
    ), r.stderr
    r = inv_cmd(
        "sweep", "--host", "node1", "--profile", "two", "--patches", "none,gather-cast", "--dry-run", env=env
    )
    assert (
        r.returncode == 2
        and "profile two is one server over nnodes=2: run the sweep on its nodes" in r.stderr
    )
    other = make_sandbox([{"name": "lone", "sglang": "0.5.23", "flashinfer": "0.7.2"}], name="lone")
    inv = yaml.safe_load(open(env["SGLOPS_INVENTORY"]).read())
    inv["hosts"] += yaml.safe_load(open(other.inventory).read())["hosts"]
    path = os.path.join(os.path.dirname(env["SGLOPS_INVENTORY"]), "mixed.yaml")
    with open(path, "w") as fh:
        yaml.safe_dump(inv, fh)
    r = inv_cmd(
        "ab",
        "--hosts",
        "node0,lone",
        "--patch",
        "gather-cast",
        "--dry-run",
        env={**env, "SGLOPS_INVENTORY": path},
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "ab runs on one host or on the nodes of one server" in r.stderr
