"""`inv ab` against the REAL SGLang 0.5.23 CPU server (tiny random Llama) on a sandbox sshd host.

One host for the module (tests/ab_real_host.py: a private hard-linked SGLang tree the test patch may replace
files of); every round is a real restart of the real server through the rendered profile. Few requests, short
outputs, 1 round.

Proofs: (a) two runs of the same profile give identical outputs; (b) a test patch that perturbs the logits is
caught as OUTPUTS DIFFER with the first divergence named, `--require-identical` exits non-zero, and the ledger
shows the patch reverted; (c) a profile that changes the KV cache dtype is an unintended config difference
unless named as the variable. Ctrl-C on the real server: tests/test_ab_real_interrupt.py (another worker).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ab_real_host import PATCH, applied, real_ab_host, run_ab, why
from conftest import inv_cmd

from sglops.sandbox import sglang_cpu

pytestmark = pytest.mark.real_server
# the unpatched "cpu" rounds of the abs below: two runs of one profile, two restarts apart
A_ROUNDS: list[str] = []


@pytest.fixture(scope="module")
def real_ab(tmp_path_factory):
    """(sandbox, env, site): host cpu-a on the private tree, profiles cpu / cpu-kv-bf16, the test patch."""
    yield from real_ab_host(tmp_path_factory, "ab-real")


def test_a_patch_that_perturbs_the_logits_is_caught_and_reverted(real_ab):
    sb, env, site = real_ab
    sampler = site / "sglang" / "srt" / "layers" / "sampler.py"
    shared = sglang_cpu.sglang_tree() / "srt" / "layers" / "sampler.py"
    # hard-linked until the patch replaces it
    assert sampler.stat().st_ino == shared.stat().st_ino
    proc, doc = run_ab(env, "-a", "cpu", "--patch", PATCH, "--rounds", "1", "--require-identical")
    # --require-identical: a difference is a failure
    assert proc.returncode == 8, why(proc, doc, env)
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
    assert doc["restore"]["ok"] and doc["restore"]["ledger"] == [] and applied(env) == []
    assert "sglops: perturb-logits-test" not in sampler.read_text() + shared.read_text()
    # the rounds compare the same way through inv compare (runs of their own)
    a, b = doc["rounds"][0]["run_id"], doc["rounds"][1]["run_id"]
    cmp = inv_cmd("compare", a, b, "--require-identical", "--no-chart", env=env)
    assert cmp.returncode == 8 and "OUTPUTS DIFFER" in cmp.stdout + cmp.stderr


def test_a_kv_dtype_profile_change_is_an_unintended_config_difference(real_ab):
    sb, env, site = real_ab
    proc, doc = run_ab(env, "-a", "cpu", "-b", "cpu-kv-bf16", "--rounds", "1", "--require-same-config")
    assert proc.returncode == 8 and "UNINTENDED" in doc["error"], why(proc, doc, env)
    print(f"\nab kv dtype, 1 round: {doc['wall_s']} s; {doc['verdict']}")
    assert doc["unintended"] == ["kv_cache_dtype"]
    A_ROUNDS.append(doc["rounds"][0]["run_id"])
    assert "1 UNINTENDED config difference: kv_cache_dtype auto -> bf16" in doc["verdict"]
    # named as the variable, the same rounds are what the engineer meant to compare
    a, b = doc["rounds"][0]["run_id"], doc["rounds"][1]["run_id"]
    named = inv_cmd(
        "compare", a, b, "--variable", "kv_dtype", "--require-same-config", "--no-chart", "--json", env=env
    )
    assert named.returncode == 0, named.stderr
    cfg = json.loads(named.stdout)["config"][b]
    assert cfg["unintended"] == [] and cfg["line"] == "config differs only as intended (kv_cache_dtype)"
    report = inv_cmd("report", doc["run_id"], env=env)
    assert report.returncode == 0, report.stderr
    page = (Path(doc["folder"]) / "run-report.md").read_text()
    assert "| kv_cache_dtype | auto | bf16 | **UNINTENDED** |" in page


def test_two_runs_of_the_same_profile_are_identical(real_ab):
    """The A rounds of the two abs above: the same profile, each after its own real restart (no restart spent
    here). Run alone (-k), an ab of the profile against itself makes the two runs."""
    sb, env, site = real_ab
    runs = A_ROUNDS[:2]
    if len(runs) < 2:
        proc, doc = run_ab(env, "-a", "cpu", "-b", "cpu", "--rounds", "1", "--require-identical")
        assert proc.returncode == 0, why(proc, doc, env)
        assert "outputs identical (2 prompts, logprobs equal)" in doc["verdict"]
        # honest with 1 round
        assert "too few rounds for a speed verdict (1 < 3)" in doc["verdict"]
        # none ran before
        assert doc["restore"]["ok"] and doc["restore"]["server"].startswith("stopped")
        runs = [r["run_id"] for r in doc["rounds"]]
    cmp = inv_cmd(
        "compare",
        runs[0],
        runs[1],
        "--require-identical",
        "--require-same-config",
        "--no-chart",
        "--json",
        env=env,
    )
    assert cmp.returncode == 0, cmp.stderr[-3000:]
    doc = json.loads(cmp.stdout)
    ident = doc["identity"][runs[1]]
    assert (
        ident["identical"] and ident["compared"] == 2 and ident["logprobs"] and ident["max_logprob_diff"] == 0
    )
    assert "outputs identical (2 prompts, logprobs equal)" in doc["headline"][runs[1]]
    assert doc["config"][runs[1]]["unintended"] == []
