"""Two operators apply (or revert) the same patch at once (red team F13): the one that waits for the host's
lock finds the work done and says "already applied" with exit 0, as a second apply always does; it used to
exit 5 with "changed on the host since it was checked".

The race is made exact, not timed: the first operator's transaction is held back (its `_txn` call) until a
second operator has applied the same patch through a connection of its own. Real sandbox host, real trees.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from inproc import run_inv

from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.patch import apply as patches


@pytest.fixture
def tree_a(use_sandbox):
    root = use_sandbox.host("gpu-a").sglang_root

    def clean() -> None:
        subprocess.run(["git", "checkout", "-q", "--", "."], cwd=root, check=True)
        shutil.rmtree(root / ".sglops", ignore_errors=True)

    clean()
    yield root
    clean()


def _other_operator_first(monkeypatch, use_sandbox, action):
    """Let another operator run `action(remote)` to completion just before our transaction goes out."""
    real = patches._txn
    state = {"raced": False}

    def txn(remote, name, op, args, **kw):
        if not state["raced"]:
            state["raced"] = True
            inv = load_inventory(use_sandbox.inventory)
            with connect(inv.get("gpu-a"), inventory=inv) as other:
                action(other, name)
        return real(remote, name, op, args, **kw)

    monkeypatch.setattr(patches, "_txn", txn)
    return state


def test_the_apply_that_loses_the_race_says_already_applied(use_sandbox, tree_a, monkeypatch, capsys):
    state = _other_operator_first(monkeypatch, use_sandbox, lambda r, n: patches.apply_patch(r, n))
    code, out, err = run_inv(capsys, "apply-patch", "gather-cast", "--host", "gpu-a")
    assert state["raced"]
    assert code == 0, err
    assert "already applied" in out and err.strip() == ""
    ledger = json.loads((tree_a / ".sglops" / "applied.json").read_text())
    assert [e["patch"] for e in ledger["applied"]] == ["gather-cast"]


def test_the_revert_that_loses_the_race_says_not_applied(use_sandbox, tree_a, monkeypatch, capsys):
    assert run_inv(capsys, "apply-patch", "gather-cast", "--host", "gpu-a")[0] == 0
    state = _other_operator_first(monkeypatch, use_sandbox, lambda r, n: patches.revert_patch(r, n))
    code, out, err = run_inv(capsys, "revert-patch", "gather-cast", "--host", "gpu-a")
    assert state["raced"]
    assert code == 0, err
    assert "not applied" in out and err.strip() == ""
    assert (
        subprocess.run(["git", "status", "--porcelain"], cwd=tree_a, capture_output=True, text=True).stdout
        == ""
    )
