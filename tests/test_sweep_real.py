"""`inv sweep` against the REAL SGLang 0.5.23 CPU server
(tiny random Llama) on a sandbox sshd host: one session.

Six candidates over the sandbox profile, each through the real launch path: torch_native (the baseline)
starts; `intel_amx` starts too, but this CPU has no AMX and SGLang serves torch_native instead (its platform
fallback, overrides.py:1303): /server_info says so and the row says "not the candidate asked for";
`--kv-cache-dtype fp8_e5m2` ("not supported on CPU") and `triton` crash, each named by its class and log line;
`cutlass_mla` (gone from 0.5.23's choices) and `trtllm_mla` (requires Blackwell; the server runs on device
cpu, whatever the sandbox's stand-in nvidia-smi lists) are skipped
by the probe facts before anything starts. The dry run before it changes and records nothing; the host is left
as found (no sglops server); every started candidate is an ordinary bench run that `inv compare` reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
CANDIDATES = ";".join(
    [
        "attention_backend=torch_native",
        "attention_backend=intel_amx",
        "attention_backend=torch_native,kv_cache_dtype=fp8_e5m2",
        "attention_backend=triton",
        "attention_backend=cutlass_mla",
        "attention_backend=trtllm_mla",
    ]
)
BENCH = ["--runs", "3", "--input-len", "16", "--output-len", "16", "--requests", "2", "--warmup", "1"]


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory):
    """(env, artifacts): host cpu-a with the real server environment, profile `cpu` on a free port."""
    require_real_server_env()
    base = tmp_path_factory.mktemp("sweep-real")
    profiles = base / "profiles"
    profiles.mkdir()
    doc = yaml.safe_load((REPO / "playbooks" / "profiles" / "sandbox-sglang-cpu.yaml").read_text())
    doc.update(port=free_port(), per_host={})
    # cheaper starts, as every other real-server module has them (real_server_host.cheaper_starts): without it
    # each candidate's start imports the ~250 model modules the tiny Llama does not need (and on a fresh CI
    # venv the first such start compiles them: the warm-up start wrote .pyc files only for what a cheaper
    # start imports)
    doc["env"] = {**(doc.get("env") or {}), **sglang_cpu.start_env()}
    (profiles / "cpu.yaml").write_text(yaml.safe_dump(doc))
    sb = Sandbox(base / "hosts", [{"name": "cpu-a", "sglang_env": "cpu"}]).start()
    env = {
        "SGLOPS_INVENTORY": str(sb.inventory),
        "SGLOPS_PROFILES": str(profiles),
        "SGLOPS_ARTIFACTS": str(base / "artifacts"),
        "COLUMNS": "220",
    }
    try:
        yield env, base / "artifacts"
    finally:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            inv = load_inventory(sb.inventory)
            with connect(inv.get("cpu-a"), inventory=inv) as remote:
                launch.stop(remote, grace_s=15)
        sb.stop()


def _sweep(env: dict, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "sweep",
            "--host",
            "cpu-a",
            "--profile",
            "cpu",
            "--candidates",
            CANDIDATES,
            *BENCH,
            *args,
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=1800,
    )
    assert proc.stdout.strip().startswith("{"), proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def test_real_sweep_starts_crashes_skips_and_restores(real_sweep):
    env, arts = real_sweep
    proc, plan = _sweep(env, "--dry-run")
    assert proc.returncode == 0 and plan["dry_run"] and not arts.exists()
    assert [r["status"] for r in plan["rows"]] == ["planned"] * 4 + ["skipped"] * 2

    proc, doc = _sweep(env, "--profile-trace")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = doc["rows"]
    print(
        "\n"
        + "\n".join(
            f"{r['candidate']['index']} {r['candidate']['label']}: {r['outcome']} | "
            f"{r['decode_tok_s']} {r['ci95']} | {r['identity']} | {r['top_cost']}"
            for r in rows
        )
    )
    print(doc["recommendation"], doc["split"], doc["wall_s"])
    base, amx, e5m2, triton, cutlass, trtllm = rows
    assert base["status"] == "started" and base["identity"] == "baseline" and base["decode_tok_s"] > 0
    assert base["ci95"][0] <= base["decode_tok_s"] <= base["ci95"][1]
    # intel_amx on a CPU without AMX: SGLang serves torch_native
    # instead (its platform fallback); /server_info says so
    assert amx["status"] == "started" and amx["served_as"] == {"attention_backend": "torch_native"}, amx
    assert "the server runs attention_backend=torch_native (asked intel_amx)" in amx["outcome"]
    # the same backend: the same tokens
    assert amx["identity"] == "identical", amx["identity_line"]
    assert (
        e5m2["status"] == "crashed"
        and e5m2["crash"] == "unsupported"
        and "fp8_e5m2 is not supported on CPU" in e5m2["crash_line"]
    )
    assert (
        triton["status"] == "crashed" and triton["crash"] not in (None, "timeout") and triton["crash_line"]
    ), triton
    # each failed start kept as a record of its own
    for row in (e5m2, triton):
        assert (arts / "cpu-a" / row["run_id"] / "restart.json").is_file()
    assert (
        cutlass["status"] == "skipped"
        and "--attention-backend cutlass_mla is not a choice of sglang 0.5.23" in cutlass["reasons"][0]
    )
    assert (
        trtllm["status"] == "skipped"
        and "requires is_blackwell (overrides.py:1210) and the server runs on device cpu"
        in trtllm["reasons"][0]
    )
    assert all(r["top_cost"] and "of CPU self time" in r["top_cost"] for r in (base, amx))
    assert doc["recommendation"].startswith(
        "fastest with outputs identical to the baseline: attention_backend=torch_native"
    )
    split = doc["split"]
    assert split["restarts"] > 0 and split["benches"] > 0 and split["tool"] >= 0
    assert abs(sum(split.values()) - doc["wall_s"]) < 0.5
    assert doc["restore"]["ok"] and doc["restore"]["server"] == "stopped (none was running before)"
    status = inv_cmd("server-status", "--host", "cpu-a", "--json", env=env)
    assert json.loads(status.stdout)["running"] is False, status.stdout[-2000:]
    cmp = inv_cmd("compare", base["run_id"], amx["run_id"], "--require-identical", "--no-chart", env=env)
    assert cmp.returncode == 0, cmp.stderr[-2000:]
    # recorded by the runner: the sweep one run, each candidate's
    # bench, failed start and profile a run of its own
    man = json.loads((arts / "cpu-a" / doc["run_id"] / "manifest.json").read_text())
    assert man["task"] == "sweep" and man["sweep"]["runs"] == [r["run_id"] for r in rows if r["run_id"]]
    for row in (base, amx):
        assert (
            json.loads((arts / "cpu-a" / row["profile_run"] / "manifest.json").read_text())["task"]
            == "profile"
        )
    rep = inv_cmd("report", doc["run_id"], env=env)
    assert rep.returncode == 0, rep.stderr[-2000:]
    page = (arts / "cpu-a" / doc["run_id"] / "run-report.md").read_text()
    assert "## Skipped before start" in page and "attention_backend=trtllm_mla: trtllm_mla requires" in page
    print(page)
    # docs/sweep.md
    Path(os.environ.get("SGLOPS_SWEEP_KEEP", arts / "sweep.json")).write_text(json.dumps(doc))
