"""`inv ab` on a sandbox host: ABAB rounds with the patch
applied/reverted and the server restarted each round.

The host is a real sshd with a real sglang 0.5.23 tree; the server is the STAND-IN, whose decode rate follows
the tree it serves (whole-pool cast vs gather-cast), so the rounds really apply and revert gather-cast and
restart on it. Its rates are set by the stand-in, not measured: these tests check the workflow (plan, ledger
checks, records, restore, exit codes), never a figure. The real-server proofs are in tests/test_ab_real.py and
tests/test_ab_real_interrupt.py.

Why the profiles here run the stand-in 10x faster (SGLOPS_STANDIN_SPEEDUP, which keeps every ratio) and load
it in 0.3 s, and why a test restarts `sbx` only when the previous test's ab did not leave it running: the
stand-in's whole-pool-cast side decodes at 10.5 tok/s, so the module spent most of its time waiting on benches
and restarts (187 s idle, 336 s in a loaded suite). The one test whose signal must land inside a bench
(SIGKILL) keeps the stand-in's own rate (`sbx-1x`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, inv_cmd, open_remote

from sglops.core.errors import ConfigError
from sglops.experiment import ab_plan
from sglops.launch import server as launch
from sglops.patch import apply as patches
from sglops.sandbox.sshd import free_port

# the stand-in 10x faster (ratios kept: every rate is
# multiplied) and loaded in 0.3 s instead of the profile's 1.0
FAST = {"SGLOPS_STANDIN_SPEEDUP": "10", "SGLOPS_STANDIN_STARTUP_S": "0.3"}


@pytest.fixture(scope="module")
def ab_host(make_sandbox, tmp_path_factory):
    """(sandbox, env): one stand-in host, profiles `sbx` (its own port, FAST), `sbx-1x` (the stand-in's own
    rate) `sbx-burst` (streams each answer in one chunk, as a starved host's server does) and `sbx-crash`
    (dies at start-up)."""
    sb = make_sandbox([{"name": "ab-1", "sglang": "0.5.23", "flashinfer": "0.7.2"}], name="ab")
    profiles = tmp_path_factory.mktemp("ab-profiles")
    doc = yaml.safe_load((REPO / "playbooks" / "profiles" / "sandbox.yaml").read_text())
    doc.update(port=free_port(), per_host={})
    doc["env"] = {**doc.get("env", {}), **FAST}
    (profiles / "sbx.yaml").write_text(yaml.safe_dump(doc))
    (profiles / "sbx-1x.yaml").write_text(
        yaml.safe_dump({"extends": "sbx", "env": {"SGLOPS_STANDIN_SPEEDUP": "1"}})
    )
    # every token in one chunk
    (profiles / "sbx-burst.yaml").write_text(
        yaml.safe_dump({"extends": "sbx", "env": {"SGLOPS_STANDIN_STREAM_INTERVAL": "64"}})
    )
    (profiles / "sbx-crash.yaml").write_text(
        yaml.safe_dump(
            {
                "extends": "sbx",
                "env": {"SGLOPS_STANDIN_FAIL": "static_assert", "SGLOPS_STANDIN_STARTUP_S": "0.2"},
            }
        )
    )
    env = {"SGLOPS_INVENTORY": str(sb.inventory), "SGLOPS_PROFILES": str(profiles)}
    yield sb, env
    with open_remote(sb, "ab-1") as remote:
        launch.stop(remote)


@pytest.fixture
def env(ab_host, tmp_path, monkeypatch):
    sb, base = ab_host
    out = {**base, "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")}
    for k, v in out.items():
        monkeypatch.setenv(k, v)
    return out


def _serving_sbx(sb) -> None:
    """`sbx` serving on its port, as every test here starts: the previous test's ab restored it, so it is
    restarted only when it is not (a test run alone, or one that failed)."""
    with open_remote(sb, "ab-1") as remote:
        st = launch.status(remote)
        if not (st.running and st.profile == "sbx" and st.health == 200):
            assert launch.restart(remote, "sbx").ok


def _host_state(sb) -> tuple[str, list[str], dict | None]:
    """git status of the tree, the ledger's patches, the
    sglops server (profile, port) as the host has them."""
    root = sb.host("ab-1").sglang_root
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    with open_remote(sb, "ab-1") as remote:
        ledger = [e["patch"] for e in patches.applied(remote)]
        st = launch.status(remote)
    return status, ledger, {"profile": st.profile, "port": st.port} if st.running else None


def _runs(env) -> list[dict]:
    return [
        json.loads(p.read_text()) for p in sorted(Path(env["SGLOPS_ARTIFACTS"]).glob("*/*/manifest.json"))
    ]


# -- sides and plans, no host ------------------------------------------------------------------------------
def test_side_spelling():
    assert ab_plan.parse_side("sandbox-sglang-cpu") == ("sandbox-sglang-cpu", ())
    assert ab_plan.parse_side("glm5+gather-cast+fp8-kv-direct") == ("glm5", ("gather-cast", "fp8-kv-direct"))
    assert ab_plan.parse_side("+gather-cast") == (None, ("gather-cast",))
    assert ab_plan.parse_side("+") == (None, ())
    assert ab_plan.sides_from(None, None, "gather-cast") == ("+", "+gather-cast")
    assert ab_plan.sides_from("glm5", None, "gather-cast") == ("glm5", "glm5+gather-cast")
    for bad, why in (
        ("glm5++x", "empty patch name"),
        ("glm5+x+x", "names a patch twice"),
        ("", "empty side"),
        ("a/b", "not a path"),
        ("glm5+../x", "not a path"),
    ):
        with pytest.raises(ConfigError, match=why):
            ab_plan.parse_side(bad)
    with pytest.raises(ConfigError, match="give both sides"):
        ab_plan.sides_from("glm5", None, None)
    with pytest.raises(ConfigError, match="not --b"):
        ab_plan.sides_from("glm5", "x", "p")


def test_the_plan_interleaves_rounds_and_restores_the_found_state():
    a = ab_plan.Side("A", "p", "p", ())
    b = ab_plan.Side("B", "p+x", "p", ("x",))
    found = ab_plan.Found(running=True, profile="q", port=31000, patches=["x", "other"])
    lines = [
        s.line() for s in ab_plan.plan_steps(a, b, 2, found, ["x"], profile_sides=True, bench_what="1 repeat")
    ]
    assert lines == [
        "round 1 A: revert x",
        "round 1 A: restart p",
        "round 1 A: bench 1 repeat",
        "round 1 A: profile one single-stream decode (torch profiler)",
        "round 1 B: apply x",
        "round 1 B: restart p",
        "round 1 B: bench 1 repeat",
        "round 1 B: profile one single-stream decode (torch profiler)",
        "round 2 A: revert x",
        "round 2 A: restart p",
        "round 2 A: bench 1 repeat",
        "round 2 B: apply x",
        "round 2 B: restart p",
        "round 2 B: bench 1 repeat",
        # x is applied again by round 2 B
        "restore: restart q (port 31000): the server the host ran before",
    ]
    # a patch named on neither side ("other") is never touched


# -- on the host ---------------------------------------------------------------------------------------------
def test_dry_run_prints_the_whole_plan_and_changes_nothing(ab_host, env):
    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    r = inv_cmd("ab", "--host", "ab-1", "--patch", "gather-cast", "--rounds", "2", "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for line in (
        "round 1 A: restart sbx",
        "round 1 B: apply gather-cast",
        "round 2 A: revert gather-cast",
        "round 2 B: bench 1 repeat(s)",
        "restore: revert gather-cast",
        "restore: restart sbx (port",
    ):
        assert line in out, line
    assert "nothing changed or recorded" in out
    assert _host_state(sb) == before and not Path(env["SGLOPS_ARTIFACTS"]).exists()
    # bad input: one line, non-zero, nothing touched
    for args, why in (
        (["-a", "sbx", "-b", "sbx+no-such-patch"], "no patch 'no-such-patch'"),
        (["-a", "no-such-profile", "-b", "sbx"], "no-such-profile"),
        (["-a", "sbx"], "give both sides"),
        (["--patch", "gather-cast", "--rounds", "0"], "--rounds"),
    ):
        r = inv_cmd("ab", "--host", "ab-1", *args, env=env)
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert _host_state(sb) == before


def test_ab_rounds_are_bench_runs_with_a_paired_verdict_and_the_host_is_restored(ab_host, env):
    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    assert before[1] == [] and before[2]["profile"] == "sbx"
    r = inv_cmd(
        "ab",
        "--host",
        "ab-1",
        "-a",
        "sbx",
        "-b",
        "sbx+gather-cast",
        "--rounds",
        "3",
        "--input-len",
        "16",
        "--output-len",
        "24",
        "--profile",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["managed_patches"] == ["gather-cast"]
    rounds = doc["rounds"]
    assert [(x["round"], x["side"]) for x in rounds] == [
        (1, "A"),
        (1, "B"),
        (2, "A"),
        (2, "B"),
        (3, "A"),
        (3, "B"),
    ]
    # each round's bench recorded the ledger its side needs (checked by ab too)
    assert [x["patches"] for x in rounds] == [[], ["gather-cast"]] * 3
    # the stand-in serves the whole-pool cast slower than
    # gather-cast: the paired verdict sees it (stand-in rates)
    assert doc["speed"]["verdict"] == "faster" and doc["speed"]["ratio"] > 1.5
    assert doc["verdict"].startswith("B faster than A (decode tok/s x")
    assert "patches" in [d["key"] for d in doc["config"]["differences"] if d["intended"]]
    # --profile: one profile per side, the trace diff ranked (the whole-pool copy kernel is what went away)
    assert set(doc["profiles"]) == {"A", "B"}
    assert "unrolled_elementwise_kernel[direct_copy_kernel_cuda" in doc["trace_diff"]["headline"]
    # restored: same server profile and port, no patch, a clean tree
    assert doc["restore"]["ok"] and _host_state(sb) == before
    # every round is an ordinary run: runs lists them, compare and report work on them
    runs = {m["run_id"]: m for m in _runs(env)}
    assert runs[doc["run_id"]]["task"] == "ab" and runs[doc["run_id"]]["status"] == "ok"
    assert all(runs[x["run_id"]]["task"] == "bench" for x in rounds)
    r = inv_cmd("compare", rounds[0]["run_id"], rounds[1]["run_id"], "--no-chart", env=env)
    assert r.returncode == 0, r.stderr
    r = inv_cmd("report", doc["run_id"], env=env)
    assert r.returncode == 0, r.stderr
    page = (Path(doc["folder"]) / "run-report.md").read_text()
    for part in (
        "# A/B on ab-1",
        "## Rounds",
        "## Speed",
        "## Outputs",
        "### Trace diff: A sbx -> B sbx+gather-cast",
        "full kernel names",
        "restored: server sbx on port",
    ):
        assert part in page, part


def test_a_failed_round_keeps_what_was_measured_and_restores_the_host(ab_host, env):
    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    r = inv_cmd(
        "ab",
        "--host",
        "ab-1",
        "-a",
        "sbx",
        "-b",
        "sbx-crash+gather-cast",
        "--rounds",
        "2",
        "--output-len",
        "16",
        env=env,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln.lower()]
    assert any(
        "round 1/2 B" in ln and "server did not come up" in ln and "measured rounds kept in" in ln
        for ln in errors
    ), r.stderr[-2000:]
    (abrun,) = [m for m in _runs(env) if m["task"] == "ab"]
    doc = json.loads(next(Path(env["SGLOPS_ARTIFACTS"]).glob(f"*/{abrun['run_id']}/ab.json")).read_text())
    assert [(x["side"], x["status"]) for x in doc["rounds"]] == [("A", "ok"), ("B", "failed")]
    assert abrun["status"] == "failed" and doc["restore"]["ok"]
    assert any(m["run_id"] == doc["rounds"][0]["run_id"] and m["task"] == "bench" for m in _runs(env))
    # gather-cast reverted, sbx running again on its port
    assert _host_state(sb) == before


def test_a_round_whose_timings_are_not_clean_still_compares_outputs_and_the_ab_goes_on(ab_host, env):
    # CI (stop 31): on a starved host the server streams bursts, every request of a short bench is kept out of
    # the figures, and ab stopped at round 1 (exit 1) without comparing outputs it had whole. A round with
    # every request answered now counts for the outputs and is left out of the speed figure; failed requests
    # still stop.
    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    r = inv_cmd(
        "ab",
        "--host",
        "ab-1",
        "-a",
        "sbx",
        "-b",
        "sbx-burst",
        "--rounds",
        "1",
        "--output-len",
        "16",
        "--require-identical",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert [(x["side"], x["status"]) for x in doc["rounds"]] == [("A", "ok"), ("B", "partial")]
    assert doc["rounds"][1]["error"].startswith("timings not clean, left out of the speed figure: ")
    assert "suspect request" in doc["rounds"][1]["error"]
    assert doc["identical"] is True and doc["speed"]["ratio"] is None
    assert "no speed figure" in doc["verdict"] and "round 1 B: timings not clean" in doc["verdict"]
    assert _ab_record(env)["status"] == "partial" and doc["restore"]["ok"]
    assert _host_state(sb) == before


# -- interrupts (red team F11): real signals to a real `inv
# ab` process against the sandbox host -----------------
class _Ab:
    """`inv ab ARGS` running in the background, its stderr read as it comes (the rounds' notes go there)."""

    def __init__(self, env: dict, *args: str, host: str = "ab-1", task: str = "ab") -> None:
        import os
        import sys
        import threading

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "invoke", task, "--host", host, *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        self.err: list[str] = []
        self.reader = threading.Thread(
            target=lambda: self.err.extend(iter(self.proc.stderr.readline, "")), daemon=True
        )
        self.reader.start()

    def wait_for(self, text: str, timeout: float = 180) -> None:
        import time

        end = time.monotonic() + timeout
        while not any(text in ln for ln in self.err):
            assert self.proc.poll() is None, f"ab ended before {text!r}: {''.join(self.err)[-2000:]}"
            assert time.monotonic() < end, f"no {text!r} within {timeout} s: {''.join(self.err)[-2000:]}"
            time.sleep(0.05)

    def finish(self, timeout: float = 240) -> tuple[int, str, str]:
        out = self.proc.stdout.read()
        rc = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return rc, out, "".join(self.err)


def _journal(sb):
    from sglops.experiment import ab_journal

    with open_remote(sb, "ab-1") as remote:
        return ab_journal.read(remote)


def _ab_record(env) -> dict:
    (abrun,) = [m for m in _runs(env) if m["task"] == "ab"]
    return abrun


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_one_interrupt_restores_the_host_and_exits_128_plus_the_signal_with_one_line(ab_host, env, sig):
    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    ab_run = _Ab(env, "--patch", "gather-cast", "--rounds", "3", "--output-len", "16")
    # gather-cast is applied on the host now
    ab_run.wait_for("round 1/3 B: restart")
    ab_run.proc.send_signal(sig)
    rc, _out, err = ab_run.finish()
    assert rc == 128 + sig, err[-3000:]
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert f"interrupted ({sig.name})" in line and "host restored (server sbx on port" in line, line
    assert "measured rounds kept in" in line
    assert _host_state(sb) == before and _journal(sb) is None
    assert _ab_record(env)["status"] == "interrupted"


def test_repeated_ctrl_c_during_the_restore_waits_for_it_and_says_so_once(ab_host, env):
    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    ab_run = _Ab(env, "--patch", "gather-cast", "--rounds", "3", "--output-len", "16")
    ab_run.wait_for("round 1/3 B: restart")
    ab_run.proc.send_signal(signal.SIGINT)
    # the restore has begun: revert gather-cast, restart sbx
    ab_run.wait_for("restore: ")
    for _ in range(4):
        ab_run.proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
    ab_run.proc.send_signal(signal.SIGTERM)
    rc, _out, err = ab_run.finish()
    assert rc == 130 and "Traceback" not in err, err[-3000:]
    assert err.count("restoring, please wait") == 1, err[-3000:]
    assert sum("interrupted (SIGINT)" in ln for ln in err.splitlines()) == 1
    # the patch is NOT left applied
    assert _host_state(sb) == before and _journal(sb) is None


def test_after_sigkill_the_journal_names_the_state_to_restore_and_the_next_ab_restores_it(ab_host, env):
    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    ab_run = _Ab(env, "-a", "sbx-1x", "-b", "sbx-1x+gather-cast", "--rounds", "3", "--output-len", "16")
    # patched, the patched server running (a 1x bench: ~1.5 s to land in)
    ab_run.wait_for("round 1/3 B: bench")
    # SIGKILL: nothing on the laptop can restore
    ab_run.proc.kill()
    ab_run.finish()
    assert _host_state(sb)[1] == ["gather-cast"]
    journal = _journal(sb)
    assert journal is not None and journal.found.patches == [] and journal.found.profile == "sbx"
    # inv patches says so
    r = inv_cmd("patches", "--host", "ab-1", env={**env, "COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert (
        f"ab {journal.run_id} was cut short" in text
        and "patches none: the next `inv ab` or `inv sweep` restores it" in text
    )
    doc = json.loads(inv_cmd("patches", "--host", "ab-1", "--json", env=env).stdout)
    assert doc["ab"]["run_id"] == journal.run_id and doc["ab"]["live"] is False
    # the next ab's plan restores the journal's state, not the patched one it finds
    r = inv_cmd("ab", "--host", "ab-1", "--patch", "gather-cast", "--rounds", "1", "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert f"earlier: ab {journal.run_id} was cut short" in out
    assert "found: server sbx on port" in out and "patches none" in out
    assert "round 1 A: revert gather-cast" in out and "restore: revert gather-cast" in out
    r = inv_cmd(
        "ab",
        "--host",
        "ab-1",
        "-a",
        "sbx",
        "-b",
        "sbx+gather-cast",
        "--rounds",
        "1",
        "--output-len",
        "16",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["took_over"]["run_id"] == journal.run_id
    assert _host_state(sb) == before and _journal(sb) is None


def test_an_ab_alive_on_this_machine_is_refused(ab_host, env):
    """A journal whose owner is a live process here (this
    test) is an ab in progress: exit 6, nothing touched."""
    from sglops.experiment import ab_journal

    sb, _ = ab_host
    _serving_sbx(sb)
    with open_remote(sb, "ab-1") as remote:
        ab_journal.begin(remote, "live-ab", ab_plan.Found(True, "sbx", None, []), [], None)
    before = _host_state(sb)
    try:
        r = inv_cmd("ab", "--host", "ab-1", "--patch", "gather-cast", "--dry-run", env=env)
        assert r.returncode == 6 and "ab live-ab in progress" in r.stderr and "Traceback" not in r.stderr, (
            r.stderr
        )
        r = inv_cmd("patches", "--host", "ab-1", env={**env, "COLUMNS": "300"})
        assert "ab live-ab in progress" in " ".join(r.stdout.split())
    finally:
        with open_remote(sb, "ab-1") as remote:
            assert ab_journal.end(remote, "live-ab")["cleared"]
    assert _host_state(sb) == before


def test_a_sigkilled_sweep_leaves_its_journal_and_the_next_sweep_restores_what_it_found(ab_host, env):
    """A sweep keeps the same journal as ab: killed with a candidate's patch applied and its server running,
    the host says what to restore, and the next sweep puts back the server and patches the first one found."""
    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    run = _Ab(
        env,
        "--profile",
        "sbx-1x",
        "--patches",
        "none,gather-cast",
        "--runs",
        "1",
        "--output-len",
        "16",
        task="sweep",
    )
    # the candidate's patch applied, its server up
    run.wait_for("base profile+gather-cast: bench")
    run.proc.kill()
    run.finish()
    assert _host_state(sb)[1] == ["gather-cast"]
    journal = _journal(sb)
    assert journal is not None and journal.what == "sweep" and journal.found.profile == "sbx"
    assert journal.found.patches == []
    r = inv_cmd("patches", "--host", "ab-1", env={**env, "COLUMNS": "300"})
    assert f"sweep {journal.run_id} was cut short" in " ".join(r.stdout.split())
    r = inv_cmd(
        "sweep",
        "--host",
        "ab-1",
        "--profile",
        "sbx",
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
    doc = json.loads(r.stdout)
    assert doc["earlier_line"].startswith(f"sweep {journal.run_id} was cut short") and doc["restore"]["ok"]
    assert _host_state(sb) == before and _journal(sb) is None


def test_of_two_operators_who_both_found_the_host_free_the_second_is_refused(ab_host, env):
    """The journal is written create-exclusive on the host: two runs that both read "no journal" cannot both
    begin; and a sweep reads it as ab does (one alive here is refused with who holds the host, exit 6)."""
    from sglops.experiment import ab_journal

    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    found = ab_plan.Found(True, "sbx", None, [])
    with open_remote(sb, "ab-1") as remote:
        ab_journal.begin(remote, "operator-1", found, [], None)
        try:
            with pytest.raises(ab_journal.AbInProgress, match="ab operator-1 .*nothing was changed"):
                ab_journal.begin(remote, "operator-2", found, [], None)
            r = inv_cmd(
                "sweep",
                "--host",
                "ab-1",
                "--profile",
                "sbx",
                "--patches",
                "none,gather-cast",
                "--dry-run",
                env=env,
            )
            assert (
                r.returncode == 6 and "ab operator-1 in progress" in r.stderr and "Traceback" not in r.stderr
            )
        finally:
            assert ab_journal.end(remote, "operator-1")["cleared"]
    assert _host_state(sb) == before


def test_while_an_ab_owns_the_host_apply_restart_and_stop_are_refused_and_a_dead_owner_holds_nothing(
    ab_host, env
):
    """Another operator's apply-patch, revert-patch, restart or stop during an ab would be undone by its
    restore: each is refused on the host with who owns it (exit 6), nothing changed. Once that ab is gone from
    this machine (killed), its journal no longer holds the host (the next ab still restores what it found)."""
    from sglops.core import owner
    from sglops.experiment import ab_journal

    sb, _ = ab_host
    _serving_sbx(sb)
    before = _host_state(sb)
    with open_remote(sb, "ab-1") as remote:
        # owner: this process
        ab_journal.begin(remote, "live-ab", ab_plan.Found(True, "sbx", None, []), [], None)
    try:
        for args in (("apply-patch", "gather-cast"), ("restart", "sbx"), ("stop",)):
            r = inv_cmd(*args, "--host", "ab-1", env=env)
            assert r.returncode == 6 and "Traceback" not in r.stderr, (args, r.stderr)
            assert "ab live-ab (started " in r.stderr and "owns this host" in r.stderr, r.stderr
        assert _host_state(sb) == before
    finally:
        with open_remote(sb, "ab-1") as remote:
            assert ab_journal.end(remote, "live-ab")["cleared"]
    gone = subprocess.Popen(["true"])
    gone.wait()
    # the same journal, its owner a process that has ended
    with open_remote(sb, "ab-1") as remote:
        doc = ab_journal.Journal(
            "dead-ab",
            ab_plan.Found(True, "sbx", None, []),
            [],
            {**owner.me(), "pid": gone.pid},
            "2026-12-06T00:00:00Z",
            [],
        )
        remote.run_py(
            "ab_journal", {"sglang_root": remote.host.sglang_root, "action": "write", "doc": doc.to_json()}
        )
    try:
        r = inv_cmd("apply-patch", "gather-cast", "--host", "ab-1", env=env)
        assert r.returncode == 0, r.stderr
        r = inv_cmd("revert-patch", "gather-cast", "--host", "ab-1", env=env)
        assert r.returncode == 0, r.stderr
    finally:
        with open_remote(sb, "ab-1") as remote:
            assert ab_journal.end(remote, "dead-ab")["cleared"]
    assert _host_state(sb) == before


def test_an_owner_on_another_machine_holds_the_host_until_taken_over_and_that_is_said(ab_host, env):
    """Another machine's ab cannot be checked from here: restart and apply-patch are refused (exit 6) with the
    way out; --take-over (apply/revert: --force) acts and the result says whose hold it passed."""
    from sglops.experiment import ab_journal

    sb, _ = ab_host
    _serving_sbx(sb)
    with open_remote(sb, "ab-1") as remote:
        doc = ab_journal.Journal(
            "far-ab",
            ab_plan.Found(True, "sbx", None, []),
            [],
            {"user": "ops", "machine": "laptop-far-away", "pid": 4242},
            "2026-12-06T01:00:00Z",
            [],
        )
        remote.run_py(
            "ab_journal", {"sglang_root": remote.host.sglang_root, "action": "write", "doc": doc.to_json()}
        )
    try:
        r = inv_cmd("restart", "sbx", "--host", "ab-1", env=env)
        assert (
            r.returncode == 6
            and "ab far-ab (started 2026-12-06T01:00:00Z by ops@laptop-far-away pid 4242) owns this host"
            in r.stderr
            and "--take-over" in r.stderr
        ), r.stderr
        r = inv_cmd("restart", "sbx", "--host", "ab-1", "--take-over", "--json", env=env)
        assert r.returncode == 0, r.stderr
        assert any("taken over: its owner was not checked" in w for w in json.loads(r.stdout)["warnings"])
        r = inv_cmd("apply-patch", "gather-cast", "--host", "ab-1", "--force", "--json", env=env)
        assert r.returncode == 0 and any("ab far-ab" in n for n in json.loads(r.stdout)["notes"]), r.stdout
        r = inv_cmd("revert-patch", "gather-cast", "--host", "ab-1", "--force", env=env)
        assert r.returncode == 0, r.stderr
    finally:
        with open_remote(sb, "ab-1") as remote:
            assert ab_journal.end(remote, "far-ab")["cleared"]


def test_signals_are_deferred_while_restoring_and_raise_before():
    """The guard itself, with real signals to this process:
    raises during the rounds, defers during the restore."""
    import os

    from sglops.experiment import ab_signals

    said: list[str] = []
    # an xdist worker ignores SIGINT
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with ab_signals.guarded_ab(said.append) as guard:
        with pytest.raises(ab_signals.Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        guard.restoring()
        for sig in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
        assert guard.deferred == [signal.SIGINT, signal.SIGINT, signal.SIGTERM]
        assert said == [ab_signals.WAIT_LINE]
    # the old handlers are back
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
