"""`inv ab` on a sandbox host: ABAB rounds with the patch applied/reverted and the server restarted each round.

The host is a real sshd with a real sglang 0.5.23 tree; the server is the STAND-IN, whose decode rate follows the
tree it serves (whole-pool cast vs gather-cast), so the rounds really apply and revert gather-cast and restart on
it. Its rates are set by the stand-in, not measured: these tests check the workflow (plan, ledger checks, records,
restore, exit codes), never a figure. The real-server proofs are in tests/test_ab_real.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, inv_cmd, open_remote

from sglops.bench import ab
from sglops.core.errors import ConfigError
from sglops.launch import server as launch
from sglops.patch import apply as patches
from sglops.sandbox.sshd import free_port


@pytest.fixture(scope="module")
def ab_host(make_sandbox, tmp_path_factory):
    """(sandbox, env): one stand-in host, profiles `sbx` (its own port) and `sbx-crash` (dies at start-up)."""
    sb = make_sandbox([{"name": "ab-1", "sglang": "0.5.23", "flashinfer": "0.7.2"}], name="ab")
    profiles = tmp_path_factory.mktemp("ab-profiles")
    doc = yaml.safe_load((REPO / "playbooks" / "profiles" / "sandbox.yaml").read_text())
    doc.update(port=free_port(), per_host={})
    (profiles / "sbx.yaml").write_text(yaml.safe_dump(doc))
    (profiles / "sbx-crash.yaml").write_text(yaml.safe_dump({"extends": "sbx", "env": {
        "SGLOPS_STANDIN_FAIL": "static_assert", "SGLOPS_STANDIN_STARTUP_S": "0.2"}}))
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


def _host_state(sb) -> tuple[str, list[str], dict | None]:
    """git status of the tree, the ledger's patches, the sglops server (profile, port) as the host has them."""
    root = sb.host("ab-1").sglang_root
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    with open_remote(sb, "ab-1") as remote:
        ledger = [e["patch"] for e in patches.applied(remote)]
        st = launch.status(remote)
    return status, ledger, {"profile": st.profile, "port": st.port} if st.running else None


def _runs(env) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(env["SGLOPS_ARTIFACTS"]).glob("*/*/manifest.json"))]


# -- sides and plans, no host ------------------------------------------------------------------------------
def test_side_spelling():
    assert ab.parse_side("sandbox-sglang-cpu") == ("sandbox-sglang-cpu", ())
    assert ab.parse_side("glm5+gather-cast+fp8-kv-direct") == ("glm5", ("gather-cast", "fp8-kv-direct"))
    assert ab.parse_side("+gather-cast") == (None, ("gather-cast",))
    assert ab.parse_side("+") == (None, ())
    assert ab.sides_from(None, None, "gather-cast") == ("+", "+gather-cast")
    assert ab.sides_from("glm5", None, "gather-cast") == ("glm5", "glm5+gather-cast")
    for bad, why in (("glm5++x", "empty patch name"), ("glm5+x+x", "names a patch twice"), ("", "empty side"),
                     ("a/b", "not a path"), ("glm5+../x", "not a path")):
        with pytest.raises(ConfigError, match=why):
            ab.parse_side(bad)
    with pytest.raises(ConfigError, match="give both sides"):
        ab.sides_from("glm5", None, None)
    with pytest.raises(ConfigError, match="not --b"):
        ab.sides_from("glm5", "x", "p")


def test_the_plan_interleaves_rounds_and_restores_the_found_state():
    a = ab.Side("A", "p", "p", ())
    b = ab.Side("B", "p+x", "p", ("x",))
    found = ab.Found(running=True, profile="q", port=31000, patches=["x", "other"])
    lines = [s.line() for s in ab.plan_steps(a, b, 2, found, ["x"], profile_sides=True, bench_what="1 repeat")]
    assert lines == [
        "round 1 A: revert x", "round 1 A: restart p", "round 1 A: bench 1 repeat",
        "round 1 A: profile one single-stream decode (torch profiler)",
        "round 1 B: apply x", "round 1 B: restart p", "round 1 B: bench 1 repeat",
        "round 1 B: profile one single-stream decode (torch profiler)",
        "round 2 A: revert x", "round 2 A: restart p", "round 2 A: bench 1 repeat",
        "round 2 B: apply x", "round 2 B: restart p", "round 2 B: bench 1 repeat",
        "restore: restart q (port 31000): the server the host ran before",  # x is applied again by round 2 B
    ]
    # a patch named on neither side ("other") is never touched


# -- on the host ---------------------------------------------------------------------------------------------
def test_dry_run_prints_the_whole_plan_and_changes_nothing(ab_host, env):
    sb, _ = ab_host
    with open_remote(sb, "ab-1") as remote:
        assert launch.restart(remote, "sbx").ok
    before = _host_state(sb)
    r = inv_cmd("ab", "--host", "ab-1", "--patch", "gather-cast", "--rounds", "2", "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    for line in ("round 1 A: restart sbx", "round 1 B: apply gather-cast", "round 2 A: revert gather-cast",
                 "round 2 B: bench 1 repeat(s)", "restore: revert gather-cast", "restore: restart sbx (port"):
        assert line in out, line
    assert "nothing changed or recorded" in out
    assert _host_state(sb) == before and not Path(env["SGLOPS_ARTIFACTS"]).exists()
    # bad input: one line, non-zero, nothing touched
    for args, why in ((["-a", "sbx", "-b", "sbx+no-such-patch"], "no patch 'no-such-patch'"),
                      (["-a", "no-such-profile", "-b", "sbx"], "no-such-profile"),
                      (["-a", "sbx"], "give both sides"), (["--patch", "gather-cast", "--rounds", "0"], "--rounds")):
        r = inv_cmd("ab", "--host", "ab-1", *args, env=env)
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert _host_state(sb) == before


def test_ab_rounds_are_bench_runs_with_a_paired_verdict_and_the_host_is_restored(ab_host, env):
    sb, _ = ab_host
    with open_remote(sb, "ab-1") as remote:
        assert launch.restart(remote, "sbx").ok
    before = _host_state(sb)
    assert before[1] == [] and before[2]["profile"] == "sbx"
    r = inv_cmd("ab", "--host", "ab-1", "-a", "sbx", "-b", "sbx+gather-cast", "--rounds", "3", "--input-len", "16",
                "--output-len", "24", "--profile", "--json", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["managed_patches"] == ["gather-cast"]
    rounds = doc["rounds"]
    assert [(x["round"], x["side"]) for x in rounds] == [(1, "A"), (1, "B"), (2, "A"), (2, "B"), (3, "A"), (3, "B")]
    # each round's bench recorded the ledger its side needs (checked by ab too)
    assert [x["patches"] for x in rounds] == [[], ["gather-cast"]] * 3
    # the stand-in serves the whole-pool cast slower than gather-cast: the paired verdict sees it (stand-in rates)
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
    for part in ("# A/B on ab-1", "## Rounds", "## Speed", "## Outputs", "### Trace diff: A sbx -> B sbx+gather-cast",
                 "full kernel names", "restored: server sbx on port"):
        assert part in page, part


def test_a_failed_round_keeps_what_was_measured_and_restores_the_host(ab_host, env):
    sb, _ = ab_host
    with open_remote(sb, "ab-1") as remote:
        assert launch.restart(remote, "sbx").ok
    before = _host_state(sb)
    r = inv_cmd("ab", "--host", "ab-1", "-a", "sbx", "-b", "sbx-crash+gather-cast", "--rounds", "2",
                "--output-len", "16", env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln.lower()]
    assert any("round 1/2 B" in ln and "server did not come up" in ln and "measured rounds kept in" in ln
               for ln in errors), r.stderr[-2000:]
    (abrun,) = [m for m in _runs(env) if m["task"] == "ab"]
    doc = json.loads(next(Path(env["SGLOPS_ARTIFACTS"]).glob(f"*/{abrun['run_id']}/ab.json")).read_text())
    assert [(x["side"], x["status"]) for x in doc["rounds"]] == [("A", "ok"), ("B", "failed")]
    assert abrun["status"] == "failed" and doc["restore"]["ok"]
    assert any(m["run_id"] == doc["rounds"][0]["run_id"] and m["task"] == "bench" for m in _runs(env))
    assert _host_state(sb) == before  # gather-cast reverted, sbx running again on its port
