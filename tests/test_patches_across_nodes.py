"""A patch on the nodes of one server (inventory node_rank 0..N-1, `--hosts n0,n1`): on every node or on none.

Two sandbox hosts, each with its own SGLang 0.5.23 checkout and its own ledger. Node 1's target file carries a
hand edit, so node 1 refuses the patch: node 0, which applied it, takes it back, and both lines name node 1.
Applied on one node alone, `inv patches` on the nodes names the one that differs.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import inv_cmd

TARGET = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"


@pytest.fixture
def nodes(make_sandbox, tmp_path):
    sb = make_sandbox(
        [
            {
                "name": f"node{i}",
                "sglang": "0.5.23",
                "flashinfer": "0.7.2",
                "node_rank": i,
                "tags": ["sandbox", "sm120"],
            }
            for i in (0, 1)
        ],
        name="nodes",
    )
    env = {"SGLOPS_INVENTORY": str(sb.inventory), "SGLOPS_ARTIFACTS": str(tmp_path / "art")}
    return sb, env


def ledger(sb, name):
    found = list((sb.host(name).sglang_root / ".sglops").glob("applied.json"))
    return json.loads(found[0].read_text())["applied"] if found else []


def test_a_node_that_refuses_the_patch_leaves_it_on_no_node(nodes):
    sb, env = nodes
    target = sb.host("node1").sglang_root / TARGET
    pristine0 = (sb.host("node0").sglang_root / TARGET).read_text()
    target.write_text(target.read_text() + "# tuned by hand on node1\n")
    r = inv_cmd("apply-patch", "gather-cast", "--hosts", "node0,node1", env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "[node1]" in r.stderr and "modified by hand on node1" in r.stderr
    assert (
        "[node0] node0: apply-patch gather-cast on none of the nodes (node0, node1): node node1 failed: "
        in r.stderr
    ) and "taken back here" in r.stderr
    assert (sb.host("node0").sglang_root / TARGET).read_text() == pristine0
    assert ledger(sb, "node0") == [] and ledger(sb, "node1") == []


def test_applied_on_every_node_then_a_node_alone_differs_and_is_named(nodes):
    sb, env = nodes
    r = inv_cmd("apply-patch", "gather-cast", "--hosts", "node0,node1", "--json", env=env)
    assert r.returncode == 0, r.stderr
    docs = json.loads(r.stdout)
    assert [d["action"] for d in docs] == ["applied", "applied"]
    assert all("on every node of the server (node0, node1)" in d["notes"] for d in docs)
    assert (
        [e["patch"] for e in ledger(sb, "node0")]
        == [e["patch"] for e in ledger(sb, "node1")]
        == ["gather-cast"]
    )
    # one node alone: allowed, and visible
    r = inv_cmd("revert-patch", "gather-cast", "--host", "node1", env=env)
    assert r.returncode == 0, r.stderr
    r = inv_cmd("patches", "--hosts", "node0,node1", "--json", env=env)
    assert r.returncode == 0, r.stderr
    by = {d["host"]: d for d in json.loads(r.stdout)}
    assert by["node0"]["differs"] and by["node1"]["differs"]
    row = next(p for p in by["node0"]["patches"] if p["patch"] == "gather-cast")
    assert "DIFFERS from other nodes (node1: applicable" in row["detail"]
