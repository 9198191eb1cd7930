"""What sglops leaves on a host: read-only commands leave nothing at all; what it keeps is private.

Read-only means read-only: `patches`, every dry run (apply-patch, revert-patch, capture-patch,
build-kernel, uninstall-kernel, restart, rollback) and the other looks (facts, server status,
kernels) take no lock, create no `.sglops/`, and never roll a pending journal either way. Checked
by a snapshot of the sandbox host's WHOLE home (every path: kind, mode, mtime, inode, size,
sha256) before and after each command, on a clean host and on one with a journal left by a
killed apply (tests/faults.py).

Secrets stay private: the state dir is 0700 (made so, or tightened when found looser), launch
scripts 0700, the ledger, journal, logs, records and lock 0600.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from sglops.core.errors import SglopsError
from sglops.kernel import build as kernels
from sglops.launch import server as launch
from sglops.patch import apply as patches
from sglops.patch.capture import capture
from sglops.probe import facts
from sglops.sandbox.sshd import free_port
from tests.conftest import REPO, inv_cmd
from tests.faults import Faults, home_snapshot, snapshot_diff

HOST = "h23"
MLA = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
ARGS = "python/sglang/srt/server_args.py"
TOKEN = "hf_planted_secret_for_the_mode_test_4242"


@pytest.fixture(scope="module")
def hsb(make_sandbox):
    return make_sandbox(
        [{"name": HOST, "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox"]}], name="hoststate"
    )


@pytest.fixture
def host_env(hsb, tmp_path, monkeypatch):
    """A pristine tree with no .sglops, a two-file patch in our own patches/, a profile with a secret,
    the fault-injecting inventory; sglops pointed at all of them."""
    sbx = hsb.host(HOST)
    root = sbx.sglang_root
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=root, check=True)
    shutil.rmtree(root / ".sglops", ignore_errors=True)
    pdir = tmp_path / "patches"
    shutil.copytree(REPO / "patches", pdir)
    args_text = (root / ARGS).read_text()
    edited = args_text.replace("class ServerArgs:", "class ServerArgs:  # sglops: two-files", 1)
    from sglops.patch.diff import make

    (pdir / "two-files").mkdir()
    (pdir / "two-files" / "sglang-0.5.23.diff").write_text(
        (REPO / "patches" / "gather-cast" / "sglang-0.5.23.diff").read_text() + make(ARGS, args_text, edited)
    )
    (pdir / "two-files" / "patch.yaml").write_text(
        json.dumps(
            {
                "description": "gather-cast plus a one-line edit of server_args.py",
                "files": [MLA, ARGS],
                "variants": [{"name": "sglang-0.5.23", "diff": "sglang-0.5.23.diff", "sglang": ["0.5.23"]}],
            }
        )
    )
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    shutil.copy(REPO / "playbooks" / "profiles" / "sandbox.yaml", profiles / "sandbox.yaml")
    (profiles / "secret.yaml").write_text(
        yaml.safe_dump(
            {
                "extends": "sandbox",
                "port": free_port(),
                "startup_timeout": 15,
                "stop_grace": 2,
                "per_host": {},
                "env": {"SGLOPS_STANDIN_STARTUP_S": "0.2", "HF_TOKEN": TOKEN},
            }
        )
    )
    faults = Faults(hsb, tmp_path / "faults")
    for k, v in {
        "SGLOPS_INVENTORY": str(faults.inventory),
        "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts"),
        "SGLOPS_PATCHES": str(pdir),
        "SGLOPS_PROFILES": str(profiles),
        "SGLOPS_PATCH_LOCK_WAIT_S": "3",
    }.items():
        monkeypatch.setenv(k, v)
    yield sbx, faults
    with faults.connect(HOST) as r:
        launch.stop(r, grace_s=1)


def read_only_commands(r) -> list[tuple[str, object]]:
    """(name, zero-argument call) for every read-only command, through the same functions `inv` calls."""
    spec = kernels.load_kernel("gather_cast")
    return [
        ("patches", lambda: patches.status(r, facts_fn=lambda _r: {})),
        (
            "apply-patch --dry-run",
            lambda: patches.apply_patch(r, "gather-cast", dry_run=True, facts_fn=lambda _r: {}),
        ),
        ("apply-patch two-files --dry-run", lambda: patches.apply_patch(r, "two-files", dry_run=True)),
        ("revert-patch --dry-run", lambda: patches.revert_patch(r, "two-files", dry_run=True)),
        ("capture-patch --dry-run", lambda: capture(r, "captured", dry_run=True)),
        ("build-kernel --dry-run", lambda: kernels.build(r, spec, dry_run=True, arch="sm_90a")),
        ("uninstall-kernel --dry-run", lambda: kernels.uninstall(r, "gather_cast", dry_run=True)),
        ("kernels", lambda: kernels.installed(r)),
        ("restart --dry-run", lambda: launch.restart(r, "secret", dry_run=True)),
        ("rollback --dry-run", lambda: launch.restart(r, None, rollback=True, dry_run=True)),
        ("server-status", lambda: launch.status(r)),
        ("facts", lambda: facts.gather(r)),
    ]


def assert_each_changes_nothing(sbx, r) -> dict[str, object]:
    """Run every read-only command; the home is identical after each. Returns each one's answer
    (or the one-line error some give on this host, e.g. nothing to roll back)."""
    answers = {}
    for name, call in read_only_commands(r):
        before = home_snapshot(sbx.home)
        try:
            answers[name] = call()
        except SglopsError as exc:
            answers[name] = exc
        assert snapshot_diff(before, home_snapshot(sbx.home)) == [], name
    return answers


def test_read_only_commands_change_nothing_on_a_clean_host(host_env):
    sbx, faults = host_env
    with faults.connect(HOST) as r:
        answers = assert_each_changes_nothing(sbx, r)
    assert not (sbx.sglang_root / ".sglops").exists()
    assert answers["apply-patch --dry-run"].action == "would apply"
    assert answers["apply-patch two-files --dry-run"].action == "would apply"
    assert answers["revert-patch --dry-run"].action == "not applied"
    assert answers["build-kernel --dry-run"].status == "would-build"
    assert "not installed" in str(answers["uninstall-kernel --dry-run"])
    assert answers["restart --dry-run"].plan and "nothing to roll back" in str(answers["rollback --dry-run"])
    assert answers["patches"].recovery_needed is None


def test_read_only_commands_leave_a_pending_journal_alone_and_say_recovery_needed(host_env):
    sbx, faults = host_env
    root = sbx.sglang_root
    with faults.connect(HOST) as r:
        assert patches.apply_patch(r, "two-files").action == "applied"
        assert patches.revert_patch(r, "two-files").action == "reverted"
        # killed with one of its two files renamed
        faults.set(SGLOPS_CRASH_AT="renamed 1")
        with faults.connect(f"{HOST}-faults") as fr, pytest.raises(SglopsError, match="connection lost"):
            patches.apply_patch(fr, "two-files")
        faults.clear()
        assert (root / ".sglops" / "journal.json").exists()
        half = subprocess.run(
            ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True
        ).stdout
        # half-way on disk, for now
        assert f" M {MLA}\n" in half and f" M {ARGS}\n" not in half

        answers = assert_each_changes_nothing(sbx, r)
        pending = answers["patches"].recovery_needed
        assert pending["op"] == "apply" and pending["patch"] == "two-files" and pending["will"] == "roll back"
        dry = answers["apply-patch two-files --dry-run"]
        # as it will be once rolled back
        assert dry.action == "would apply" and dry.recovery_needed == pending
        assert sorted(dry.files) == [MLA, ARGS]
        rows = {row.patch: row.status for row in answers["patches"].rows}
        assert rows["two-files"] == "applicable" and rows["gather-cast"] == "applicable"
        assert "recovery needed" in str(answers["capture-patch --dry-run"])

    before = home_snapshot(sbx.home)
    out = inv_cmd("patches", "--host", HOST)
    assert out.returncode == 0, out.stderr
    assert "recovery needed: apply of two-files was cut short" in " ".join(out.stdout.split())
    dry = inv_cmd("apply-patch", "two-files", "--host", HOST, "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["recovery_needed"]["will"] == "roll back", (
        dry.stderr
    )
    assert snapshot_diff(before, home_snapshot(sbx.home)) == []

    # mutating: recovers
    done = json.loads(inv_cmd("apply-patch", "two-files", "--host", HOST, "--json").stdout)
    assert done["recovered"]["outcome"] == "rolled back" and done["action"] == "applied"
    assert not (root / ".sglops" / "journal.json").exists()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_state_dir_scripts_and_logs_are_private_and_a_loose_state_dir_is_tightened(host_env):
    sbx, faults = host_env
    state = sbx.sglang_root / ".sglops"
    with faults.connect(HOST) as r:
        # makes .sglops/
        assert patches.apply_patch(r, "two-files").action == "applied"
        assert mode(state) == 0o700
        for name in ("applied.json", "lock", ".gitignore"):
            assert mode(state / name) == 0o600, name
        first = launch.restart(r, "secret")
        assert first.ok, first.log_tail
        script = state / "launch.sh"
        # the secret is there: hence the modes
        assert TOKEN in script.read_text()
        assert mode(script) == 0o700 and mode(state / "launch.last-good.sh") == 0o700
        for name in (
            "server.log",
            "restarts.jsonl",
            "server.json",
            "server.pid",
            "launch.last-good.json",
            "server.lock",
        ):
            assert mode(state / name) == 0o600, name

        # as an older sglops left it: everything world-readable
        for p in [state, *state.iterdir()]:
            p.chmod(0o755 if p.is_dir() or p.suffix == ".sh" else 0o644)
        second = launch.restart(r, "secret")
        assert second.ok, second.log_tail
        assert mode(state) == 0o700
        assert mode(script) == 0o700 and mode(state / "launch.sh.prev") == 0o700
        assert mode(state / "launch.last-good.sh") == 0o700
        for name in ("server.log", "restarts.jsonl", "server.json", "server.pid", "server.lock"):
            assert mode(state / name) == 0o600, name
        assert patches.revert_patch(r, "two-files").action == "reverted"
        assert mode(state / "applied.json") == 0o600 and mode(state / "lock") == 0o600
