"""Versioned patches against real SGLang release trees on real sshd sandbox hosts (loopback).

The workflow: `inv patches`, `inv apply-patch NAME --dry-run`, apply, apply again (no change),
revert, revert again; and every way it must refuse without touching the tree: unknown patch,
a variant that does not apply, hand-modified files, unmet requirements, drift, a held lock, and
an SSH connection dropped (really: the session's sshd process is killed) in the middle of an apply.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from sglops.core.errors import SglopsError
from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.patch import apply as patches
from tests.conftest import REPO, inv_cmd
from tests.faults import Faults

MLA = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
HOSTS = {"p23": "0.5.23", "p15": "0.5.15", "p04": "0.4.10"}


@pytest.fixture(scope="module")
def psb(make_sandbox):
    return make_sandbox(
        [
            {"name": n, "sglang": v, "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]}
            for n, v in HOSTS.items()
        ],
        name="patches",
    )


@pytest.fixture
def env(psb, monkeypatch, tmp_path):
    """Fresh trees (git HEAD, no .sglops), our own copy of patches/, sglops pointed at the sandbox."""
    for h in psb.hosts:
        subprocess.run(["git", "checkout", "-q", "--", "."], cwd=h.sglang_root, check=True)
        shutil.rmtree(h.sglang_root / ".sglops", ignore_errors=True)
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    e = {
        "SGLOPS_INVENTORY": str(psb.inventory),
        "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts"),
        "SGLOPS_PATCHES": str(tmp_path / "patches"),
        "SGLOPS_PATCH_LOCK_WAIT_S": "3",
    }
    for k, v in e.items():
        monkeypatch.setenv(k, v)
    return e


def remote(psb, name):
    inv = load_inventory(psb.inventory)
    return connect(inv.get(name), inventory=inv)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_snapshot(root: Path) -> dict:
    """Hashes of every file in the release tree (excluding our own state) to prove "nothing changed"."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {"status": out, "mla": digest(root / MLA)}


def ledger(root: Path) -> dict:
    p = root / ".sglops" / "applied.json"
    return json.loads(p.read_text()) if p.exists() else {"applied": []}


def inv_json(*args):
    proc = inv_cmd(*args, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("host", list(HOSTS))
def test_gather_cast_apply_is_atomic_recorded_idempotent_and_reverts(env, psb, host):
    root = psb.host(host).sglang_root
    pristine = tree_snapshot(root)
    listed = {p["patch"]: p for p in inv_json("patches", "--host", host)["patches"]}
    assert listed["gather-cast"]["status"] == "applicable"
    assert listed["gather-cast"]["variant"] == f"sglang-{HOSTS[host]}"

    dry = inv_cmd("apply-patch", "gather-cast", "--host", host, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would apply" in dry.stdout and "sglops: gather-cast" in dry.stdout and MLA in dry.stdout
    assert tree_snapshot(root) == pristine and not ledger(root)["applied"]

    done = inv_json("apply-patch", "gather-cast", "--host", host)
    assert done["action"] == "applied" and done["changed"] is True
    text = (root / MLA).read_text()
    assert "sglops: gather-cast" in text and "get_key_buffer(layer.layer_id).to(q.dtype)" not in text
    compile(text, MLA, "exec")
    (entry,) = ledger(root)["applied"]
    assert entry["patch"] == "gather-cast" and entry["variant"] == f"sglang-{HOSTS[host]}"
    assert entry["files"][MLA] == {"before": pristine["mla"], "after": digest(root / MLA)}
    assert entry["sglang_version"] == HOSTS[host] and len(entry["sglang_commit"]) == 40 and entry["operator"]
    assert (root / ".sglops" / "backups" / "gather-cast" / MLA).read_bytes() != (root / MLA).read_bytes()

    again = inv_json("apply-patch", "gather-cast", "--host", host)
    assert again["action"] == "already applied" and again["changed"] is False
    assert ledger(root)["applied"] == [entry]
    with remote(psb, host) as r:
        assert patches.applied(r) == [entry]
    listed = {p["patch"]: p for p in inv_json("patches", "--host", host)["patches"]}
    assert listed["gather-cast"]["status"] == "applied"
    # same lines, already rewritten
    assert listed["fp8-kv-direct"]["status"] == "conflicting"

    back = inv_json("revert-patch", "gather-cast", "--host", host)
    assert back["action"] == "reverted" and back["changed"] is True
    assert tree_snapshot(root) == pristine and ledger(root)["applied"] == []
    back = inv_json("revert-patch", "gather-cast", "--host", host)
    assert back["action"] == "not applied" and back["changed"] is False


@pytest.mark.parametrize("host", ["p23", "p15"])
def test_fp8_kv_direct_requires_fp8_mla_flashinfer_on_sm90(env, psb, host):
    root = psb.host(host).sglang_root
    pristine = tree_snapshot(root)
    refused = inv_cmd("apply-patch", "fp8-kv-direct", "--host", host)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "gpu_sm is 'sm120'" in refused.stderr and "--force" in refused.stderr
    assert tree_snapshot(root) == pristine and not ledger(root)["applied"]

    # the same patch where the facts are met: no --force needed
    with remote(psb, host) as r:
        met = {
            "flashinfer_mla_hopper_fp8": True,
            "flashinfer_mla_fp8_scale_mode": True,
            "flashinfer_mla_fp8_run_scales": True,
            "gpu_sm": "sm90",
        }
        res = patches.apply_patch(r, "fp8-kv-direct", facts_fn=lambda _: met)
        assert res.action == "applied"
        assert "self.data_type = model_runner.kv_cache_dtype" in (root / MLA).read_text()
        assert patches.revert_patch(r, "fp8-kv-direct").action == "reverted"
    assert tree_snapshot(root) == pristine

    forced = inv_json("apply-patch", "fp8-kv-direct", "--host", host, "--force")
    assert forced["action"] == "applied" and any("requirement not met" in n for n in forced["notes"])
    assert inv_json("revert-patch", "fp8-kv-direct", "--host", host)["action"] == "reverted"


def test_unknown_patch_lists_the_available_ones(env):
    proc = inv_cmd("apply-patch", "gather-kast", "--host", "p23")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert (
        "no patch 'gather-kast'" in proc.stderr
        and "gather-cast" in proc.stderr
        and "fp8-kv-direct" in proc.stderr
    )


def test_variant_that_does_not_apply_names_files_and_hunks_and_changes_nothing(env, psb):
    root = psb.host("p23").sglang_root
    pristine = tree_snapshot(root)
    proc = inv_cmd("apply-patch", "gather-cast", "--host", "p23", "--variant", "sglang-0.5.15")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    msg = proc.stderr
    assert "does not apply" in msg and MLA in msg and "hunk #" in msg and "nothing changed" in msg
    assert tree_snapshot(root) == pristine and not ledger(root)["applied"]


def test_no_exact_variant_picks_the_one_that_applies(env, psb, tmp_path):
    yaml_path = tmp_path / "patches" / "gather-cast" / "patch.yaml"
    yaml_path.write_text(yaml_path.read_text().replace('sglang: ["0.5.23"]', 'sglang: ["0.5.22"]'))
    with remote(psb, "p23") as r:
        res = patches.apply_patch(r, "gather-cast", dry_run=True)
    assert (
        res.variant == "sglang-0.5.23"
        and "no variant targets sglang 0.5.23" in res.how
        and "checked" in res.how
    )


def test_hand_modified_files_are_refused_without_force(env, psb):
    root = psb.host("p15").sglang_root
    path = root / MLA
    path.write_text(path.read_text() + "\n# tuned by hand on the host\n")
    before = tree_snapshot(root)
    proc = inv_cmd("apply-patch", "gather-cast", "--host", "p15")
    assert proc.returncode != 0 and "modified by hand" in proc.stderr and MLA in proc.stderr
    assert tree_snapshot(root) == before and not ledger(root)["applied"]
    forced = inv_json("apply-patch", "gather-cast", "--host", "p15", "--force")
    assert forced["action"] == "applied" and "# tuned by hand on the host" in path.read_text()


def test_drift_is_shown_and_blocks_revert_until_forced(env, psb):
    root = psb.host("p23").sglang_root
    pristine = tree_snapshot(root)
    assert inv_json("apply-patch", "gather-cast", "--host", "p23")["changed"]
    path = root / MLA
    path.write_text(path.read_text().replace("sglops: gather-cast --", "sglops: gather-cast (edited) --"))
    listed = {p["patch"]: p for p in inv_json("patches", "--host", "p23")["patches"]}
    assert listed["gather-cast"]["status"] == "drifted" and MLA in listed["gather-cast"]["detail"]
    refused = inv_cmd("revert-patch", "gather-cast", "--host", "p23")
    assert refused.returncode != 0 and "drifted" in refused.stderr and MLA in refused.stderr
    assert "(edited)" in path.read_text()
    again = inv_cmd("apply-patch", "gather-cast", "--host", "p23")
    assert again.returncode != 0 and "drifted" in again.stderr
    assert inv_json("revert-patch", "gather-cast", "--host", "p23", "--force")["action"] == "reverted"
    assert tree_snapshot(root) == pristine and not ledger(root)["applied"]


def test_a_held_lock_serialises_operators(env, psb):
    root = psb.host("p23").sglang_root
    (root / ".sglops").mkdir(exist_ok=True)
    with open(root / ".sglops" / "lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write("pid 1 another-operator\n")
        fh.flush()
        proc = inv_cmd("apply-patch", "gather-cast", "--host", "p23")
    assert proc.returncode != 0 and "held by pid 1 another-operator" in proc.stderr
    assert not ledger(root)["applied"]


# -- capture and the dropped connection: a two-file patch captured from hand edits ----------
TWO = ["python/sglang/srt/layers/attention/flashinfer_mla_backend.py", "python/sglang/srt/server_args.py"]


def capture_two_file_patch(psb, root: Path) -> None:
    for i, rel in enumerate(TWO):
        p = root / rel
        p.write_text(p.read_text() + f"\n# sglops test edit {i}\n")
    dry = inv_cmd("capture-patch", "two-files", "--host", "p23", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert (
        "# sglops test edit 1" in dry.stdout
        and not (Path(os.environ["SGLOPS_PATCHES"]) / "two-files").exists()
    )
    got = inv_json("capture-patch", "two-files", "--host", "p23")
    assert sorted(got["files"]) == sorted(TWO) and len(got["written"]) == 2
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=root, check=True)


def session_sshd(script_pid: int, listener_pid: int) -> int:
    """The per-connection sshd process above the remote script (its parent chain up to the listener)."""
    pid = script_pid
    while True:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if ppid == listener_pid:
            return pid
        if ppid <= 1:
            raise AssertionError("no sshd session above the remote script")
        pid = ppid


@pytest.fixture
def faults(psb, env, tmp_path, monkeypatch):
    """Fault-injecting twins of the hosts (tests/faults.py):
    SGLOPS_PAUSE_AT / SGLOPS_CRASH_AT in the host env."""
    f = Faults(psb, tmp_path / "faults")
    monkeypatch.setenv("SGLOPS_INVENTORY", str(f.inventory))
    return f


def apply_in_background(faults, pause_s: float):
    """Apply two-files on p23, the host process pausing right after its first file is renamed."""
    seen: dict = {}
    paused = threading.Event()
    outcome: dict = {}

    def on_progress(ev):
        if ev.get("step") == "paused":
            seen.update(ev)
            paused.set()

    faults.set(SGLOPS_PAUSE_AT=f"renamed 1:{pause_s}")
    r = faults.connect("p23-faults")

    def run():
        try:
            outcome["result"] = patches.apply_patch(r, "two-files", on_progress=on_progress)
        except SglopsError as exc:
            outcome["error"] = str(exc)
        finally:
            r.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert paused.wait(30), "the host never reached the pause"
    faults.clear()
    return seen, t, outcome


def test_capture_then_connection_dropped_mid_apply_leaves_tree_whole(env, psb, faults):
    sbx = psb.host("p23")
    root = sbx.sglang_root
    capture_two_file_patch(psb, root)
    old = {rel: digest(root / rel) for rel in TWO}

    seen, t, outcome = apply_in_background(faults, pause_s=2.0)
    # half-way on the host right now: first file renamed, second not yet
    assert digest(root / TWO[0]) != old[TWO[0]] and digest(root / TWO[1]) == old[TWO[1]]
    # the connection really drops
    os.kill(session_sshd(seen["pid"], sbx.proc.pid), signal.SIGKILL)
    t.join(30)
    assert "error" in outcome and "connection" in outcome["error"].lower()

    # waits on the host's lock until the orphaned apply has finished
    with remote(psb, "p23") as r:
        res = patches.apply_patch(r, "two-files")
        assert res.action == "already applied" and not res.changed and res.recovered is None
        listed = {p.patch: p for p in patches.status(r, facts_fn=lambda _: {}).rows}
        assert listed["two-files"].status == "applied"
        (entry,) = patches.applied(r)
    # whole-new, ledger agrees
    assert all(entry["files"][rel]["after"] == digest(root / rel) for rel in TWO)
    assert all(entry["files"][rel]["before"] == old[rel] for rel in TWO)
    assert not (root / ".sglops" / "journal.json").exists()


def test_patches_tells_a_live_transaction_from_one_cut_short(env, psb, faults):
    """The SSH session drops mid-apply but the host helper lives on (red team F2): `patches` must say it is in
    progress and whose, never "cut short ... the next
    apply-patch rolls it back" while it is about to finish."""
    sbx = psb.host("p23")
    capture_two_file_patch(psb, sbx.sglang_root)
    seen, t, outcome = apply_in_background(faults, pause_s=10.0)
    os.kill(session_sshd(seen["pid"], sbx.proc.pid), signal.SIGKILL)
    t.join(30)
    listed = inv_json("patches", "--host", "p23")
    assert f"pid {seen['pid']}" in (listed["recovery_needed"]["live"] or "")
    text = " ".join(inv_cmd("patches", "--host", "p23").stdout.split())
    assert "in progress: apply of two-files" in text and "cut short" not in text
    journal = sbx.sglang_root / ".sglops" / "journal.json"
    deadline = time.monotonic() + 30
    # the orphaned helper finishes on its own
    while journal.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert inv_json("apply-patch", "two-files", "--host", "p23")["action"] == "already applied"


def test_apply_killed_half_way_is_reported_by_patches_and_rolled_back_by_the_next_apply(env, psb, faults):
    root = psb.host("p23").sglang_root
    capture_two_file_patch(psb, root)
    old = {rel: digest(root / rel) for rel in TWO}

    # the host process dies between the two renames
    faults.set(SGLOPS_CRASH_AT="renamed 1")
    with faults.connect("p23-faults") as fr, pytest.raises(SglopsError, match="connection lost during apply"):
        patches.apply_patch(fr, "two-files")
    faults.clear()
    assert digest(root / TWO[0]) != old[TWO[0]] and (root / ".sglops" / "journal.json").exists()

    # read-only: says so, changes nothing
    listed = inv_json("patches", "--host", "p23")
    assert listed["recovery_needed"]["op"] == "apply" and listed["recovery_needed"]["will"] == "roll back"
    # as it will be
    assert {p["patch"]: p for p in listed["patches"]}["two-files"]["status"] == "applicable"
    assert digest(root / TWO[0]) != old[TWO[0]] and (root / ".sglops" / "journal.json").exists()
    text = inv_cmd("patches", "--host", "p23")
    assert "recovery needed: apply of two-files was cut short" in " ".join(text.stdout.split())

    # recovers first, then applies
    done = inv_json("apply-patch", "two-files", "--host", "p23")
    assert done["recovered"]["outcome"] == "rolled back" and done["action"] == "applied"
    assert not (root / ".sglops" / "journal.json").exists()
    assert inv_json("apply-patch", "two-files", "--host", "p23")["action"] == "already applied"


def test_capture_against_the_pypi_release(env, psb):
    root = psb.host("p15").sglang_root
    p = root / TWO[1]
    p.write_text(p.read_text().replace("def ", "def  ", 1))
    with remote(psb, "p15") as r:
        from sglops.patch.capture import capture

        got = capture(r, "hand-edits", against="release", dry_run=True)
    assert got.files == [TWO[1]] and got.variant == "sglang-0.5.15" and "+def  " in got.diff
