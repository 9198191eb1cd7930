"""The launch workflow against a REAL SGLang 0.5.23 server on a sandbox host (sglang_env: cpu).

The host's python is the server venv's and its SGLang tree is the venv's pip-installed site-packages/sglang;
the profile is the repo's playbooks/profiles/sandbox-sglang-cpu.yaml. One host and one server for the module
(a real start takes 20-60 s here): render, facts, restart (with the attention path check of `--check-path`),
status, logs, stop, some crash classes, rollback. The other
crash classes and a port taken run on a host of their own in tests/test_real_server_crashes.py (another xdist
worker); the host and helpers of both are tests/real_server_host.py. Needs the environment scripts/setup.sh
builds (`python -m sglops.sandbox.sglang_cpu`): without it these tests skip with that reason, except on CI,
where they fail.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from real_server_host import (
    PROFILE,
    WORKFLOW_CRASHES,
    port_free,
    real_host,
    server_processes,
    start_up_failure_is_named_and_leaves_nothing,
    variant,
)

from sglops.core.errors import ConfigError
from sglops.core.op import Context, new_run_id
from sglops.launch import ops as launch_ops
from sglops.launch import server as launch
from sglops.launch.path_check import check_restart
from sglops.launch.results import RestartResult, confirm
from sglops.sandbox import sglang_cpu
from sglops.sandbox.sshd import free_port
from tests.conftest import inv_cmd

pytestmark = pytest.mark.real_server


# the restart test's server (port, log tail), for the path check that reads it
_STATE: dict = {}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(sandbox, remote): one sshd host whose SGLang is
    the real pip-installed 0.5.23, sglops pointed at it."""
    yield from real_host(tmp_path_factory, "real")


# -- the host and the script -----------------------------------------------------------------------
def test_render_spells_the_real_server_for_a_pip_installed_tree(real):
    sb, remote = real
    r = inv_cmd("render", PROFILE, "--host", "cpu-a", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["argv"][:3] == [str(sglang_cpu.venv_python()), "-m", "sglang.launch_server"]
    assert out["argv"][out["argv"].index("--model-path") + 1] == str(sglang_cpu.model_dir())
    script = out["script"]
    assert "--cuda-graph-backend-decode disabled" in script and "--disable-cuda-graph" not in script
    assert "export SGLANG_USE_CPU_ENGINE=1" in script
    # never cd into site-packages, no made-up folder
    assert "\ncd " not in script and "PYTHONPATH" not in script
    with pytest.raises(ConfigError, match=r"unknown attention backend 'bogus_attn'.*valid: .*torch_native"):
        launch.render_for(remote, variant("typo", attention_backend="bogus_attn"))


def test_facts_and_patches_meet_the_pip_installed_tree(real):
    r = inv_cmd("facts", "--host", "cpu-a", "--json")
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)
    # the server's python, not the system's
    assert facts["python"]["executable"] == str(sglang_cpu.venv_python())
    # with its local tag, as torch.__version__ says
    assert facts["torch"]["version"].startswith("2.14.1+cu")
    assert (facts["sglang"]["kind"], facts["sglang"]["version"]) == ("installed", sglang_cpu.SGLANG_VERSION)
    assert facts["sglang"]["package_dir"] == str(sglang_cpu.sglang_tree())
    r = inv_cmd("patches", "--host", "cpu-a")
    assert r.returncode == 0 and "gather-cast" in r.stdout and "applicable" in r.stdout, r.stderr


def test_a_missing_host_var_is_one_line(real):
    r = inv_cmd("render", variant("needs-var", tokenizer_path="{vars.tokenizer_dir}"), "--host", "cpu-a")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "refers to {vars.tokenizer_dir} but host cpu-a has no var 'tokenizer_dir'" in r.stderr


# -- restart, status, logs, stop ----------------------------------------------------------------------
def test_restart_comes_up_and_every_rendered_argument_is_confirmed(real):
    """Through what `inv restart PROFILE --check-path` runs (sglops.launch.ops.restart: the restart, then the
    attention path predicted from the host's tree checked against the server's /server_info)."""
    sb, remote = real
    seen: list[dict] = []
    res = launch_ops.restart(
        Context(remote, new_run_id(), on_event=seen.append), PROFILE, port=free_port(), check_path=True
    )
    assert res.ok and res.state == "healthy", (res.failure_line(), res.log_tail)
    _STATE.update(port=res.port, log_tail=res.log_tail)
    print(f"\nrestart-to-healthy {res.waited_s:.1f}s")
    assert (
        res.server_info_endpoint == "/server_info" and res.server_info["version"] == sglang_cpu.SGLANG_VERSION
    )
    assert not res.mismatches and not res.unconfirmed, (res.mismatches, res.unconfirmed)
    for key in (
        "model_path",
        "device",
        "attention_backend",
        "grammar_backend",
        "max_total_tokens",
        "max_running_requests",
        "mem_fraction_static",
        "cuda_graph_backend_decode",
        "cuda_graph_backend_prefill",
    ):
        assert key in res.confirmed, key
    assert any(ev.get("phase") == "waiting for /health" for ev in seen)
    # --check-path: the predicted backends confirmed from /server_info (a difference would be in mismatches)
    assert res.server_info["attention_backend"] == "torch_native"
    for stage in ("prefill", "decode"):
        said = res.confirmed[f"attention {stage}"]
        assert said.startswith("torch_native as predicted (--attention-backend)"), said
    names = " ".join(server_processes(res.pid).values())
    assert "sglang::scheduler" in names and "sglang::detokenizer" in names
    state = Path(res.log_path).parent
    assert str(state).startswith(str(sb.host("cpu-a").home / ".local" / "state" / "sglops"))
    assert not (sglang_cpu.site_packages() / ".sglops").exists()


def test_server_status_and_logs_read_the_real_server(real):
    r = inv_cmd("server-status", "--host", "cpu-a", "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["running"] and st["health"] == 200 and st["server_info"]["attention_backend"] == "torch_native"
    r = inv_cmd("logs", "--host", "cpu-a", "--lines", "400")
    assert r.returncode == 0 and "fired up and ready to roll" in r.stdout


def test_check_path_is_a_flag_of_inv_restart(real):
    """The flag the restart test's path takes on the command
    line (a dry run: nothing is started or checked)."""
    r = inv_cmd(
        "restart",
        PROFILE,
        "--host",
        "cpu-a",
        "--port",
        str(free_port()),
        "--check-path",
        "--dry-run",
        "--json",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    res = res[0] if isinstance(res, list) else res
    assert res.get("result", res)["state"] == "dry-run"


def test_a_prediction_the_server_does_not_run_is_called_a_difference(real):
    """A launch the server did NOT get (--attention-backend triton), checked against the running server: the
    check says they differ, and reads the prediction from the host's own config.json."""
    sb, remote = real
    if "port" not in _STATE:
        pytest.skip("the restart above did not come up")
    info = launch.server_info(remote, _STATE["port"])
    result = RestartResult(
        host="cpu-a",
        profile=PROFILE,
        ok=True,
        state="healthy",
        port=_STATE["port"],
        server_info=info,
        log_tail=_STATE["log_tail"],
    )
    args = {"model_path": str(sglang_cpu.model_dir()), "attention_backend": "triton"}
    cmp = check_restart(remote, result, args)
    # read from the host's config.json
    assert cmp is not None and cmp["predicted"]["arch"] == "LlamaForCausalLM"
    assert cmp["predicted"]["mla"] is False and cmp["predicted"]["sparse"] is False
    assert result.mismatches["attention decode"] == {"asked": "predicted triton", "effective": "torch_native"}
    assert result.mismatches["attention prefill"]["effective"] == "torch_native"
    assert cmp["stages"]["decode"]["field"] == "attention_backend"


def test_a_misspelt_argument_is_caught_by_the_confirmation(real):
    """What the server runs is compared with what was asked: a value SGLang changes shows as a mismatch."""
    res = launch.RestartResult(host="cpu-a", profile=PROFILE, ok=True, state="healthy", port=1)
    confirm(
        res,
        {"max_running_requests": "8", "mem_fraction_static": "0.05", "no_such_arg": "1"},
        {"max_running_requests": 4, "mem_fraction_static": 0.05},
    )
    assert res.mismatches == {"max_running_requests": {"asked": "8", "effective": 4}}
    assert res.unconfirmed == ["no_such_arg"] and res.confirmed == {"mem_fraction_static": 0.05}


def test_stop_ends_the_whole_process_tree(real):
    sb, remote = real
    pid = launch.status(remote).pid
    assert pid, "the healthy server of the restart test is gone"
    port = launch.status(remote).port
    before = server_processes(pid)
    assert len(before) >= 3
    t0 = time.monotonic()
    stopped = launch.stop(remote, grace_s=15)
    print(
        f"\nstop {time.monotonic() - t0:.1f}s ({stopped['took_s']:.1f}s on the host, {stopped['processes']}"
        " processes)"
    )
    assert stopped["stopped"] and stopped["left"] == []
    still = {p: n for p, n in before.items() if Path(f"/proc/{p}").exists() and p in server_processes(pid)}
    assert not still and not server_processes(pid)
    assert port_free(port) and not launch.status(remote).running


# -- crash classes, end to end (the others:
# tests/test_real_server_crashes.py) ------------------------------------
@pytest.mark.parametrize("case", WORKFLOW_CRASHES)
def test_a_real_start_up_failure_is_named_and_leaves_nothing(real, case):
    sb, remote = real
    start_up_failure_is_named_and_leaves_nothing(remote, case)


def test_rollback_brings_back_the_last_healthy_server(real):
    sb, remote = real
    r = inv_cmd("rollback", "--host", "cpu-a", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    st = launch.status(remote)
    assert st.running and st.health == 200 and st.profile == PROFILE
    assert launch.server_info(remote)["model_path"] == str(sglang_cpu.model_dir())
