"""`inv ab` against the REAL SGLang 0.5.23 CPU server (tiny random Llama) on a sandbox sshd host.

One host for the module; every round is a real restart of the real server through the rendered profile. The
host's SGLang tree is a PRIVATE hard-linked copy of the server venv's site-packages/sglang (on PYTHONPATH in the
profile), so the test patch that perturbs the sampler never touches the tree other tests and servers use: a
patch replaces a file by rename, so the shared inode is never written. Few requests, short outputs, 1 round.

Proofs: (a) two runs of the same profile give identical outputs; (b) a test patch that perturbs the logits is
caught as OUTPUTS DIFFER with the first divergence named, `--require-identical` exits non-zero, and the ledger
shows the patch reverted; (c) a profile that changes the KV cache dtype is an unintended config difference
unless named as the variable.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, inv_cmd, require_real_server_env

from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.launch import server as launch
from sglops.sandbox import sglang_cpu
from sglops.sandbox.sshd import Sandbox, free_port

pytestmark = pytest.mark.real_server
PATCH = "perturb-logits-test"
BENCH = ["--input-len", "12", "--output-len", "12", "--requests", "2", "--warmup", "1"]
A_ROUNDS: list[str] = []  # the unpatched "cpu" rounds of the abs below: two runs of one profile, two restarts apart


def private_tree(base: Path) -> Path:
    """site-packages/{sglang, its dist-info} hard-linked from the server venv: cheap, and safe to patch."""
    src = sglang_cpu.site_packages()
    site = base / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for name in ["sglang", *[p.name for p in src.glob("sglang-*.dist-info")]]:
        shutil.copytree(src / name, site / name, copy_function=os.link, symlinks=True)
    return site


@pytest.fixture(scope="module")
def real_ab(tmp_path_factory):
    """(sandbox, env, site): host cpu-a on the private tree, profiles cpu / cpu-kv-bf16, the test patch."""
    require_real_server_env()
    base = tmp_path_factory.mktemp("ab-real")
    site = private_tree(base / "tree")
    profiles = base / "profiles"
    profiles.mkdir()
    doc = yaml.safe_load((REPO / "playbooks" / "profiles" / "sandbox-sglang-cpu.yaml").read_text())
    doc.update(port=free_port(), per_host={})
    doc["env"] = {**doc.get("env", {}), "PYTHONPATH": str(site), **sglang_cpu.start_env()}  # cheaper starts
    (profiles / "cpu.yaml").write_text(yaml.safe_dump(doc))
    (profiles / "cpu-kv-bf16.yaml").write_text(yaml.safe_dump({"extends": "cpu", "kv_cache_dtype": "bf16"}))
    patch_root = base / "patches"
    shutil.copytree(REPO / "tests" / "data" / "patches" / PATCH, patch_root / PATCH)
    sb = Sandbox(base / "hosts", [{"name": "cpu-a", "sglang_env": "cpu"}]).start()
    inv_doc = yaml.safe_load(Path(sb.inventory).read_text())
    for h in inv_doc["hosts"]:
        h["sglang_root"] = str(site / "sglang")
    inventory = base / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(inv_doc))
    env = {"SGLOPS_INVENTORY": str(inventory), "SGLOPS_PROFILES": str(profiles), "SGLOPS_PATCHES": str(patch_root),
           "SGLOPS_ARTIFACTS": str(base / "artifacts"), "COLUMNS": "200"}
    try:
        yield sb, env, site
    finally:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            inv = load_inventory(inventory)
            with connect(inv.get("cpu-a"), inventory=inv) as remote:
                launch.stop(remote, grace_s=15)
        sb.stop()


def _ab(env: dict, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`inv ab --json` as a user runs it (a real server restarts take minutes on a busy machine)."""
    proc = subprocess.run([sys.executable, "-m", "invoke", "ab", "--host", "cpu-a", *args, *BENCH, "--json"],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, **env}, timeout=3000)
    assert proc.stdout.strip().startswith("{"), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def _ledger(env: dict) -> list[str]:
    proc = inv_cmd("patches", "--host", "cpu-a", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return [p["patch"] for p in json.loads(proc.stdout)["patches"] if p["status"] == "applied"]


def test_a_patch_that_perturbs_the_logits_is_caught_and_reverted(real_ab):
    sb, env, site = real_ab
    sampler = site / "sglang" / "srt" / "layers" / "sampler.py"
    shared = sglang_cpu.sglang_tree() / "srt" / "layers" / "sampler.py"
    assert sampler.stat().st_ino == shared.stat().st_ino  # hard-linked until the patch replaces it
    proc, doc = _ab(env, "-a", "cpu", "--patch", PATCH, "--rounds", "1", "--require-identical")
    assert proc.returncode == 8, proc.stderr[-3000:]  # --require-identical: a difference is a failure
    assert doc["kind"] == "differ" and "OUTPUTS DIFFER" in doc["error"] and "Traceback" not in proc.stderr
    print(f"\nab perturbed, 1 round: {doc['wall_s']} s; {doc['verdict']}")
    assert doc["rounds"][1]["patches"] == [PATCH] and doc["rounds"][0]["patches"] == []
    A_ROUNDS.append(doc["rounds"][0]["run_id"])
    assert doc["identical"] is False and "OUTPUTS DIFFER at token" in doc["verdict"]
    first = doc["identity"]["first_divergence"]
    assert first["a_id"] != first["b_id"] and 0 <= first["token_index"] < 12 and first["prompt"]
    assert f"token {first['token_index']} of prompt {first['prompt_index']}" in doc["verdict"]
    assert any(line.startswith("first divergence: token") for line in doc["identity_lines"])
    assert doc["config"]["line"].startswith("config differs only as intended (patches)")
    # the host ledger shows the patch reverted; the shared tree was never written
    assert doc["restore"]["ok"] and doc["restore"]["ledger"] == [] and _ledger(env) == []
    assert "sglops: perturb-logits-test" not in sampler.read_text() + shared.read_text()
    # the rounds compare the same way through inv compare (runs of their own)
    a, b = doc["rounds"][0]["run_id"], doc["rounds"][1]["run_id"]
    cmp = inv_cmd("compare", a, b, "--require-identical", "--no-chart", env=env)
    assert cmp.returncode == 8 and "OUTPUTS DIFFER" in cmp.stdout + cmp.stderr


def test_a_kv_dtype_profile_change_is_an_unintended_config_difference(real_ab):
    sb, env, site = real_ab
    proc, doc = _ab(env, "-a", "cpu", "-b", "cpu-kv-bf16", "--rounds", "1", "--require-same-config")
    assert proc.returncode == 8 and "UNINTENDED" in doc["error"], proc.stderr[-3000:]
    print(f"\nab kv dtype, 1 round: {doc['wall_s']} s; {doc['verdict']}")
    assert doc["unintended"] == ["kv_cache_dtype"]
    A_ROUNDS.append(doc["rounds"][0]["run_id"])
    assert "1 UNINTENDED config difference: kv_cache_dtype auto -> bf16" in doc["verdict"]
    # named as the variable, the same rounds are what the engineer meant to compare
    a, b = doc["rounds"][0]["run_id"], doc["rounds"][1]["run_id"]
    named = inv_cmd("compare", a, b, "--variable", "kv_dtype", "--require-same-config", "--no-chart", "--json",
                    env=env)
    assert named.returncode == 0, named.stderr
    cfg = json.loads(named.stdout)["config"][b]
    assert cfg["unintended"] == [] and cfg["line"] == "config differs only as intended (kv_cache_dtype)"
    report = inv_cmd("report", doc["run_id"], env=env)
    assert report.returncode == 0, report.stderr
    page = (Path(doc["folder"]) / "run-report.md").read_text()
    assert "| kv_cache_dtype | auto | bf16 | **UNINTENDED** |" in page


def test_two_runs_of_the_same_profile_are_identical(real_ab):
    """The A rounds of the two abs above: the same profile, each after its own real restart (no restart spent here).
    Run alone (-k), an ab of the profile against itself makes the two runs."""
    sb, env, site = real_ab
    runs = A_ROUNDS[:2]
    if len(runs) < 2:
        proc, doc = _ab(env, "-a", "cpu", "-b", "cpu", "--rounds", "1", "--require-identical")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "outputs identical (2 prompts, logprobs equal)" in doc["verdict"]
        assert "too few rounds for a speed verdict (1 < 3)" in doc["verdict"]  # honest with 1 round
        assert doc["restore"]["ok"] and doc["restore"]["server"].startswith("stopped")  # none ran before
        runs = [r["run_id"] for r in doc["rounds"]]
    cmp = inv_cmd("compare", runs[0], runs[1], "--require-identical", "--require-same-config", "--no-chart", "--json",
                  env=env)
    assert cmp.returncode == 0, cmp.stderr[-3000:]
    doc = json.loads(cmp.stdout)
    ident = doc["identity"][runs[1]]
    assert ident["identical"] and ident["compared"] == 2 and ident["logprobs"] and ident["max_logprob_diff"] == 0
    assert "outputs identical (2 prompts, logprobs equal)" in doc["headline"][runs[1]]
    assert doc["config"][runs[1]]["unintended"] == []


def test_ctrl_c_on_the_real_server_restores_the_tree_and_a_second_one_waits(real_ab):
    """F11 on the real server: Ctrl-C while round 1 B restarts the real server on the patched tree (that restart
    keeps running on the host: the restore waits for its lock), then Ctrl-C twice during the restore. The restore
    runs to its end: the patch reverted, the found server back, one line, exit 130, no journal left."""
    from test_ab import _Ab

    sb, env, site = real_ab
    up = inv_cmd("restart", "cpu", "--host", "cpu-a", env=env)
    assert up.returncode == 0, up.stderr[-3000:]
    ab_run = _Ab(env, "-a", "cpu", "--patch", PATCH, "--rounds", "2", *BENCH, host="cpu-a")
    ab_run.wait_for("round 1/2 B: restart", timeout=1500)
    ab_run.proc.send_signal(signal.SIGINT)
    ab_run.wait_for("restore: ", timeout=600)
    ab_run.proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    ab_run.proc.send_signal(signal.SIGINT)
    rc, _out, err = ab_run.finish(timeout=1800)
    assert rc == 130 and "Traceback" not in err, err[-3000:]
    assert err.count("restoring, please wait") == 1, err[-3000:]
    (line,) = [ln for ln in err.splitlines() if "interrupted (SIGINT)" in ln]
    assert "host restored (server cpu on port" in line and "patches none" in line, line
    assert _ledger(env) == [] and "sglops: perturb-logits-test" not in (site / "sglang" / "srt" / "layers" /
                                                                       "sampler.py").read_text()
    doc = json.loads(inv_cmd("patches", "--host", "cpu-a", "--json", env=env).stdout)
    assert doc["ab"] is None
    st = json.loads(inv_cmd("server-status", "--host", "cpu-a", "--json", env=env).stdout)
    assert st["running"] and st["profile"] == "cpu" and st["health"] == 200
