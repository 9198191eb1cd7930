"""Crash-point sweep: the host process is killed after EVERY durable step of apply and of revert.

A two-file patch (gather-cast's real 0.5.23 diff plus an edit of server_args.py) on a sandbox
host. The host scripts count their durable steps; SGLOPS_CRASH_AT=<n>, set in the host's own
environment (tests/faults.py), SIGKILLs the process right after step n. The sweep raises n from 1
until the command completes, so no step is skipped and the step list is what the code really
does. After each crash:
  - `inv patches` (read-only) changes nothing on the host, says "recovery needed" exactly when a
    journal is pending, and shows the patch as it will be after recovery;
  - the next command (apply after an apply crash, revert after a revert crash) recovers: the tree
    is whole-old or whole-new as the read-only look predicted, the ledger agrees with the tree,
    backups exist for the applied patch, no orphan (`*.sglops-new`, `*.sglops-tmp`, txn folder,
    temp file, held or stale lock) remains;
  - the reverse command then works.
The second sweep kills the RECOVERY itself after each of its steps (a crash during recovery), from
three crash points that leave different work (half renamed; all renamed and the ledger written;
committed), for apply and for revert, and checks that the command after that still ends whole.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sglops.core.errors import ConnectError
from sglops.patch import apply as patches
from sglops.patch import diff as patch_diff
from tests.conftest import REPO
from tests.faults import Faults, home_snapshot, snapshot_diff

NAME = "gather-cast-two"
MLA = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
ARGS = "python/sglang/srt/server_args.py"
FILES = [MLA, ARGS]
HOST = "c23"
NO_FACTS = {"facts_fn": lambda _r: {}}


@pytest.fixture(scope="module")
def csb(make_sandbox):
    return make_sandbox(
        [{"name": HOST, "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox"]}], name="crash"
    )


@pytest.fixture(scope="module")
def crash_env(csb, tmp_path_factory):
    """A patches folder with the two-file patch, the fault-injecting inventory, sglops pointed at both."""
    folder = tmp_path_factory.mktemp("crash-env")
    root = csb.host(HOST).sglang_root
    pdir = folder / "patches" / NAME
    pdir.mkdir(parents=True)
    args_text = (root / ARGS).read_text()
    edited = args_text.replace("class ServerArgs:", "class ServerArgs:  # sglops: gather-cast-two", 1)
    assert edited != args_text
    diff = (REPO / "patches" / "gather-cast" / "sglang-0.5.23.diff").read_text() + patch_diff.make(
        ARGS, args_text, edited
    )
    (pdir / "sglang-0.5.23.diff").write_text(diff)
    (pdir / "patch.yaml").write_text(
        json.dumps(
            {
                "description": "gather-cast plus a one-line edit of server_args.py: a real multi-file patch",
                "files": FILES,
                "variants": [{"name": "sglang-0.5.23", "diff": "sglang-0.5.23.diff", "sglang": ["0.5.23"]}],
            }
        )
    )
    faults = Faults(csb, folder / "faults")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {
            "SGLOPS_PATCHES": str(folder / "patches"),
            "SGLOPS_INVENTORY": str(faults.inventory),
            "SGLOPS_ARTIFACTS": str(folder / "artifacts"),
            "SGLOPS_PATCH_LOCK_WAIT_S": "3",
        }.items():
            mp.setenv(k, v)
        yield faults


def digests(root: Path) -> dict[str, str]:
    return {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in FILES}


def reset(root: Path) -> None:
    """The pristine release tree, no sglops state, no leftovers beside the targets."""
    subprocess.run(["git", "checkout", "-q", "--", *FILES], cwd=root, check=True)
    shutil.rmtree(root / ".sglops", ignore_errors=True)
    for rel in FILES:
        for suffix in (".sglops-new", ".sglops-tmp"):
            (root / (rel + suffix)).unlink(missing_ok=True)


def assert_whole(root: Path, old: dict, new: dict, expect: str) -> None:
    """Tree whole-old or whole-new as expected, ledger and backups agreeing, no orphan, lock free."""
    state = root / ".sglops"
    book = (
        json.loads((state / "applied.json").read_text())
        if (state / "applied.json").exists()
        else {"applied": []}
    )
    entries = [e for e in book["applied"] if e["patch"] == NAME]
    if expect == "new":
        assert digests(root) == new
        (entry,) = entries
        assert entry["files"] == {rel: {"before": old[rel], "after": new[rel]} for rel in FILES}
        assert {
            rel: hashlib.sha256((state / "backups" / NAME / rel).read_bytes()).hexdigest() for rel in FILES
        } == old
    else:
        assert digests(root) == old
        assert not entries and not (state / "backups" / NAME).exists()
    assert not (state / "journal.json").exists()
    assert not (state / "txn").exists() or not any((state / "txn").iterdir()), list((state / "txn").iterdir())
    assert not [p.name for p in state.glob("*.tmp")]
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert sorted(status) == (sorted(f" M {rel}" for rel in FILES) if expect == "new" else []), status
    lock = state / "lock"
    if lock.exists():
        assert lock.read_text() == "", f"stale lock holder: {lock.read_text()!r}"
        with open(lock) as fh:
            # raises if anything still holds it
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def run_until_crash(faults: Faults, fr, crash_at: int | str, op: str) -> str | None:
    """Run op (apply or revert) on the fault host, killed after durable step crash_at: the step's
    name, or None when the command completed (crash_at is past its last step)."""
    seen: list[dict] = []
    faults.set(SGLOPS_CRASH_AT=crash_at)
    try:
        fn = patches.apply_patch if op == "apply" else patches.revert_patch
        done = fn(fr, NAME, on_progress=seen.append, **(NO_FACTS if op == "apply" else {}))
        assert done.action in ("applied", "reverted", "already applied", "not applied"), done
        return None
    except ConnectError:
        points = [e for e in seen if "crash_point" in e]
        assert points and crash_at in (points[0]["crash_point"], points[0]["step"]), seen
        return points[0]["step"]
    finally:
        faults.clear()


def read_only_look(r, home: Path) -> tuple[str, dict | None]:
    """`patches` after the crash: nothing on the host changes; the patch's status and the pending note."""
    before = home_snapshot(home, hashes=False)
    listing = patches.status(r, **NO_FACTS)
    assert snapshot_diff(before, home_snapshot(home, hashes=False)) == []
    (row,) = [row for row in listing.rows if row.patch == NAME]
    assert row.status in ("applied", "applicable"), row
    return row.status, listing.recovery_needed


def crash(faults, r, fr, sbx, op: str, n: int | str) -> tuple[str | None, str, dict | None]:
    """From a fresh tree (with the patch applied, for a revert): op killed after step n, then the
    read-only look. (step name or None, "new"/"old" as `patches` says it will be, the pending note)."""
    reset(sbx.sglang_root)
    if op == "revert":
        assert patches.apply_patch(r, NAME, **NO_FACTS).action == "applied"
    step = run_until_crash(faults, fr, n, op)
    journal = (sbx.sglang_root / ".sglops" / "journal.json").exists()
    status, pending = read_only_look(r, sbx.home)
    assert (pending is not None) == journal, (step, pending)
    assert not pending or (pending["op"] == op and pending["patch"] == NAME)
    return step, "new" if status == "applied" else "old", pending


def next_command_ends_whole(
    r, sbx, op: str, will_be: str, pending: dict | None, old: dict, new: dict, why
) -> None:
    """The same command again recovers first, then does its job; the reverse command then works."""
    root = sbx.sglang_root
    if op == "apply":
        res = patches.apply_patch(r, NAME, **NO_FACTS)
        assert res.action == ("already applied" if will_be == "new" else "applied"), (why, res)
        assert_whole(root, old, new, "new")
        assert patches.revert_patch(r, NAME).action == "reverted"
        assert_whole(root, old, new, "old")
    else:
        res = patches.revert_patch(r, NAME)
        assert res.action == ("not applied" if will_be == "old" else "reverted"), (why, res)
        assert_whole(root, old, new, "old")
        assert patches.apply_patch(r, NAME, **NO_FACTS).action == "applied"
        assert_whole(root, old, new, "new")
    if pending:
        assert res.recovered and res.recovered["outcome"] == (
            "finished" if pending["will"] == "roll forward" else "rolled back"
        ), (why, res.recovered)
        assert (will_be == "new") == ((op == "apply") == (pending["will"] == "roll forward")), why


def sweep(faults: Faults, r, fr, sbx, op: str, old: dict, new: dict) -> list[str]:
    """Every crash point of op, raising n until op completes; returns the step names in order."""
    names = []
    for n in range(1, 100):
        step, will_be, pending = crash(faults, r, fr, sbx, op, n)
        if step is None:
            assert_whole(sbx.sglang_root, old, new, "new" if op == "apply" else "old")
            return names
        names.append(step)
        next_command_ends_whole(r, sbx, op, will_be, pending, old, new, step)
    raise AssertionError(f"{op} never completed")


RECOVERY_STEPS = {"rolled-back", "backups kept", "backups dropped", "txn removed", "journal removed"}


def sweep_recovery(faults: Faults, r, fr, sbx, op: str, n: str, old: dict, new: dict) -> list[str]:
    """op killed after step n; then the recovery (run by the same op again) killed after its first
    durable step, again and again: each run starts where the last was killed, so every recovery
    step is a crash point in turn. After each, `patches` still predicts the same end, and finally
    the op ends whole. Returns the recovery's step names."""
    step, will_be, pending = crash(faults, r, fr, sbx, op, n)
    assert pending, f"{op} step {n} ({step}) leaves no journal to recover"
    names = []
    while True:
        second = run_until_crash(faults, fr, 1, op)
        if second is None or second not in RECOVERY_STEPS:
            break
        names.append(second)
        status, _ = read_only_look(r, sbx.home)
        # the same way, whatever the crash
        assert ("new" if status == "applied" else "old") == will_be, (step, second)
        assert len(names) < 10, names
    # the op went past recovery (and was perhaps killed in its own first step): once more, cleanly
    status, pending2 = read_only_look(r, sbx.home)
    next_command_ends_whole(
        r, sbx, op, "new" if status == "applied" else "old", pending2, old, new, (step, second)
    )
    return names


@pytest.fixture(scope="module")
def remotes(crash_env, csb):
    """(old digests, new digests, a plain remote, a fault-injecting remote), both kept open."""
    root = csb.host(HOST).sglang_root
    reset(root)
    old = digests(root)
    with crash_env.connect(HOST) as r, crash_env.connect(f"{HOST}-faults") as fr:
        assert patches.apply_patch(r, NAME, **NO_FACTS).action == "applied"
        new = digests(root)
        assert all(new[rel] != old[rel] for rel in FILES)
        yield old, new, r, fr
    reset(root)


def test_every_crash_point_of_apply_and_revert_recovers_whole(crash_env, csb, remotes):
    old, new, r, fr = remotes
    sbx = csb.host(HOST)
    t0 = time.monotonic()
    applied = sweep(crash_env, r, fr, sbx, "apply", old, new)
    reverted = sweep(crash_env, r, fr, sbx, "revert", old, new)
    print(
        f"\ncrash-point sweep: apply {len(applied)} points {applied}; revert {len(reverted)} points"
        f" {reverted}; {time.monotonic() - t0:.1f} s"
    )
    per_file = ["saved 1", "staged 1", "saved 2", "staged 2", "renamed 1", "renamed 2"]
    assert all(s in applied and s in reverted for s in per_file + ["preparing", "prepared", "committed"])
    assert applied[-3:] == ["backups kept", "txn removed", "journal removed"]
    assert reverted[-3:] == ["backups dropped", "txn removed", "journal removed"]


@pytest.mark.parametrize("op", ["apply", "revert"])
@pytest.mark.parametrize("at", ["renamed 1", "ledger written", "committed"])
def test_a_crash_during_recovery_is_recovered_again(crash_env, csb, remotes, op, at):
    """Half-renamed, renamed with the ledger written (both rolled back), committed (rolled forward)."""
    old, new, r, fr = remotes
    sbx = csb.host(HOST)
    t0 = time.monotonic()
    steps = sweep_recovery(crash_env, r, fr, sbx, op, at, old, new)
    print(f"\nrecovery sweep after {op} {at}: {len(steps)} points {steps}; {time.monotonic() - t0:.1f} s")
    assert steps[-2:] == ["txn removed", "journal removed"]
    assert steps[0] == (
        "rolled-back" if at != "committed" else "backups kept" if op == "apply" else "backups dropped"
    )
