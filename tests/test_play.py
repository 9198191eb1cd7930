"""Plays as the operator runs them: the whole fp8-kv-decode investigation on a sandbox host.

The host is a real sshd with a real sglang 0.5.23 tree; the server is the stand-in, whose decode
rate follows the tree it serves (whole-pool cast vs gather-cast), so the play's verdict comes from
the patch really being applied and the server really restarted on it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, inv_cmd, open_remote

from sglops.core.errors import ConfigError
from sglops.play.ops import parse_vars
from sglops.play.spec import load_play
from sglops.sandbox.sshd import free_port
from sglops.sandbox.standin_kv_cost import SEED_RATE, step_model


@pytest.fixture(scope="module")
def play_host(make_sandbox):
    return make_sandbox([{"name": "play-1", "sglang": "0.5.23", "flashinfer": "0.7.2"}], name="play")


@pytest.fixture
def env(play_host, tmp_path):
    return {"SGLOPS_INVENTORY": str(play_host.inventory), "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")}


def _tree_state(sb) -> tuple[str, bool]:
    root = sb.host("play-1").sglang_root
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    return status, (root / ".sglops" / "server.pid").exists()


def _runs(env) -> list[dict]:
    return [
        json.loads(p.read_text()) for p in sorted(Path(env["SGLOPS_ARTIFACTS"]).glob("*/*/manifest.json"))
    ]


def test_a_play_file_is_checked_whole_before_anything_runs(tmp_path):
    def play(text: str) -> Path:
        path = tmp_path / "p.yaml"
        path.write_text(text)
        return path

    with pytest.raises(ConfigError, match=r"p.yaml:3: unknown step 'benchmark'; steps are: .*bench"):
        load_play(str(play("steps:\n  - do: facts\n  - do: benchmark\n")))
    with pytest.raises(ConfigError, match=r"p.yaml:2: step bench \(bench\) has no parameter 'rnus'"):
        load_play(str(play("steps:\n  - do: bench\n    with: {rnus: 3}\n")))
    with pytest.raises(ConfigError, match=r"'profile' is undefined .*--var"):
        load_play(str(play("steps:\n  - do: restart\n    with: {profile: '{{ profile }}'}\n")))
    with pytest.raises(ConfigError, match="used twice"):
        load_play(str(play("steps:\n  - do: facts\n  - do: facts\n")))
    with pytest.raises(ConfigError, match="no play 'nope'; plays in .*: fp8-kv-decode"):
        load_play("nope")
    assert load_play("fp8-kv-decode", {"runs": 3}).steps[3].params["runs"] == 3
    assert parse_vars(["runs=3", "profile=sandbox", "port=null"]) == {
        "runs": 3,
        "profile": "sandbox",
        "port": None,
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_vars(["runs"])


def test_dry_run_prints_the_plan_and_changes_nothing(play_host, env):
    before = _tree_state(play_host)
    res = inv_cmd(
        "play",
        "fp8-kv-decode",
        "--host",
        "play-1",
        "--dry-run",
        "--var",
        "profile=sandbox-demo",
        "--var",
        f"port={free_port()}",
        env=env,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    # the patch's real diff is shown
    assert "_sglops_cast_kv" in res.stdout
    assert "would" in res.stdout and "dry run" in res.stdout
    assert _tree_state(play_host) == before, "a dry run must not touch the tree or start a server"
    (manifest,) = _runs(env)
    assert manifest["dry_run"] is True and manifest["run_id"].endswith("-dry")


def test_the_investigation_end_to_end(play_host, env):
    res = inv_cmd(
        "play",
        "fp8-kv-decode",
        "--host",
        "play-1",
        "--var",
        "profile=sandbox-demo",
        "--var",
        "runs=5",
        "--var",
        "output_len=96",
        "--var",
        f"port={free_port()}",
        env=env,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    (manifest,) = [m for m in _runs(env) if m["task"] == "play"]
    play = json.loads(
        (Path(env["SGLOPS_ARTIFACTS"]) / "play-1" / manifest["run_id"] / "play.json").read_text()
    )
    steps = {s["id"]: s for s in play["steps"]}
    assert all(s["status"] == "ok" for s in steps.values())
    # the probe flagged the whole-pool cast; the baseline profile named it; the patch went in
    assert "casts the whole KV pool" in steps["probe"]["summary"]
    assert steps["baseline-profile"]["summary"].startswith("dtype conversion (aten::copy_")
    assert steps["patch"]["result"]["variant"] == "sglang-0.5.23"
    base = steps["baseline-bench"]["result"]["levels"][0]["decode_tok_s"]["median"]
    patched = steps["patched-bench"]["result"]["levels"][0]["decode_tok_s"]["median"]
    # the stand-in's rates are set by its decode model run on the served tree's own code (before and after the
    # patch), not measured on a GPU: the benchmark must reproduce the ratio that model sets
    served = play_host.host("play-1").sglang_root / "python" / "sglang"
    assert patched / base == pytest.approx(step_model(str(served))["rate"] / SEED_RATE, rel=0.05)
    row = next(r for r in steps["compare"]["result"]["rows"] if r["metric"] == "decode tok/s")
    assert row["verdict"] == "faster"
    # the manifest ties the figures to what produced them
    assert manifest["facts"]["gpus"][0]["sm"] == "sm120"
    assert [p["patch"] for p in manifest["patches"]] == ["gather-cast"]
    assert (
        manifest["launch"][0]["argv"][0] == "sglang-standin"
        and "--kv-cache-dtype" in manifest["launch"][0]["argv"]
    )
    # bench steps are runs of their own, so `inv compare` and `inv runs` see them
    assert {m["run_id"] for m in _runs(env)} >= {
        f"{manifest['run_id']}-baseline-bench",
        f"{manifest['run_id']}-patched-bench",
    }
    rep = inv_cmd("report", manifest["run_id"], env=env)
    assert rep.returncode == 0, rep.stderr
    text = (Path(env["SGLOPS_ARTIFACTS"]) / "play-1" / manifest["run_id"] / "run-report.md").read_text()
    for heading in (
        "## Host",
        "## Probes",
        "## Patches on the host at the end",
        "## Benchmarks",
        "## Comparison",
        "## Profiles",
    ):
        assert heading in text
    assert inv_cmd("revert-patch", "gather-cast", "--host", "play-1", env=env).returncode == 0
    _stop_server(play_host)


def _stop_server(sb) -> None:
    from sglops.launch import server as launch

    with open_remote(sb, "play-1") as remote:
        launch.stop(remote)


def test_a_failed_step_stops_the_play_and_from_resumes_it(play_host, env, tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "sandbox.yaml").write_text((REPO / "playbooks" / "profiles" / "sandbox.yaml").read_text())
    (profiles / "crashy.yaml").write_text(
        yaml.safe_dump(
            {
                "extends": "sandbox",
                "env": {"SGLOPS_STANDIN_FAIL": "static_assert", "SGLOPS_STANDIN_STARTUP_S": "0.2"},
            }
        )
    )
    playfile = tmp_path / "short.yaml"
    playfile.write_text(
        yaml.safe_dump(
            {
                "name": "short",
                "vars": {"profile": "crashy", "port": free_port()},
                "steps": [
                    {"id": "facts", "do": "facts"},
                    {"id": "up", "do": "restart", "with": {"profile": "{{ profile }}", "port": "{{ port }}"}},
                    {"id": "bench", "do": "bench", "with": {"runs": 1, "output_len": 8}},
                ],
            }
        )
    )
    env = {**env, "SGLOPS_PROFILES": str(profiles)}
    res = inv_cmd("play", str(playfile), "--host", "play-1", env=env)
    assert res.returncode == 1
    assert "stopped at step up" in res.stderr and "static_assert" in res.stderr
    assert "--from up" in res.stderr and "Traceback" not in res.stderr
    (manifest,) = [m for m in _runs(env) if m["task"] == "play"]
    assert manifest["failed_step"] == "up"
    resumed = inv_cmd(
        "play", str(playfile), "--host", "play-1", "--from", "up", "--var", "profile=sandbox", env=env
    )
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr
    assert "reused" in resumed.stdout
    runs = [m for m in _runs(env) if m["task"] == "play"]
    assert len(runs) == 1 and runs[0]["ok"] is True, "resuming continues the same run"
    stopped = inv_cmd("play", str(playfile), "--host", "play-1", "--from", "nosuchstep", env=env)
    assert stopped.returncode == 2 and "has no step 'nosuchstep'" in stopped.stderr
    _stop_server(play_host)
