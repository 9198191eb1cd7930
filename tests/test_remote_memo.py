"""The connection's memo of host reads: facts, the tree's root and the patch ledger asked once, never stale.

A read is answered from the memo until a step that may change the host (any other run, run_py or put); where
the tree is lasts until the connection closes. Counted in round trips on real hosts: this machine and the
sandbox sshd host gpu-a (a real SGLang 0.5.23 tree, a real patch applied and reverted).
"""

from __future__ import annotations

import pytest

from sglops.core.hosts import Host
from sglops.core.remote import LocalRemote
from sglops.launch import server as launch
from sglops.patch import apply as patches
from sglops.patch import spec as patch_spec
from sglops.probe import facts
from sglops.sandbox.sshd import HOST_PYTHON


def trips(r, fn) -> int:
    before = r.round_trips
    fn()
    return r.round_trips - before


def test_facts_are_read_once_until_a_step_and_each_caller_gets_its_own_copy(tmp_path):
    r = LocalRemote(Host(name="local", address="local", python=HOST_PYTHON))
    first = facts.gather(r).data
    assert r.round_trips == 1
    first["hostname"] = "changed by a caller"
    second = facts.gather(r).data
    assert r.round_trips == 1 and second["hostname"] != "changed by a caller"
    assert trips(r, lambda: facts.gather(r, port=30001)) == 1, "another question is another read"
    # any other step may change the host
    r.run(["true"])
    assert trips(r, lambda: facts.gather(r)) == 1
    r.put(__file__, str(tmp_path / "copy.py"))
    assert trips(r, lambda: facts.gather(r)) == 1
    r.close()
    assert trips(r, lambda: facts.gather(r)) == 1 and r.memo.hits == 1


def test_a_failed_read_is_not_remembered():
    r = LocalRemote(Host(name="local", address="local", python=HOST_PYTHON))
    calls = []

    def read():
        calls.append(1)
        raise OSError("no answer")

    for _ in range(2):
        with pytest.raises(OSError):
            r.remembered("x", read)
    assert len(calls) == 2


def test_the_ledger_is_read_once_and_never_stale_after_apply_and_revert(remote_a):
    r = remote_a
    assert trips(r, lambda: patches.applied(r)) == 1
    assert trips(r, lambda: patches.applied(r)) == 0
    # reads only: kept
    assert trips(r, lambda: patches.apply_patch(r, "gather-cast", dry_run=True)) == 1
    assert trips(r, lambda: patches.applied(r)) == 0
    try:
        patches.apply_patch(r, "gather-cast")
        assert [e["patch"] for e in patches.applied(r)] == ["gather-cast"], "the apply dropped the old answer"
        assert trips(r, lambda: patches.applied(r)) == 0
    finally:
        patches.revert_patch(r, "gather-cast")
    assert patches.applied(r) == []
    patches.host_state(r, patch_spec.load("gather-cast").files, contents=False)
    assert trips(r, lambda: patches.applied(r)) == 0, "a read of the host state carries the whole ledger"


def test_the_trees_root_lasts_the_connection(remote_a):
    r = remote_a
    # where the tree is, then its server's state
    assert trips(r, lambda: launch.inspect_state(r, tail=0)) == 2
    assert trips(r, lambda: launch.inspect_state(r, tail=0)) == 1
    r.run(["true"])
    assert trips(r, lambda: launch.inspect_state(r, tail=0)) == 1, "sglops' own steps never move the tree"
    r.close()
    assert trips(r, lambda: launch.inspect_state(r, tail=0)) == 2, "a new connection asks again"
