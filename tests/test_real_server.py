"""The launch workflow against a REAL SGLang 0.5.23 server on a sandbox host (sglang_env: cpu).

The host's python is the server venv's and its SGLang tree is the venv's pip-installed site-packages/sglang; the
profile is the repo's playbooks/profiles/sandbox-sglang-cpu.yaml. One host and one server for the module (a real
start takes 20-60 s here): render, facts, restart, status, logs, stop, some crash classes, rollback. The other
crash classes and a port taken run on a host of their own in tests/test_real_server_crashes.py (another xdist
worker); the host and helpers of both are tests/real_server_host.py. Needs the environment scripts/setup.sh builds
(`python -m sglops.sandbox.sglang_cpu`): without it these tests skip with that reason, except on CI, where they fail.
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
from sglops.launch import server as launch
from sglops.launch.results import confirm
from sglops.sandbox import sglang_cpu
from sglops.sandbox.sshd import free_port
from tests.conftest import inv_cmd

pytestmark = pytest.mark.real_server


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(sandbox, remote): one sshd host whose SGLang is the real pip-installed 0.5.23, sglops pointed at it."""
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
    assert "\ncd " not in script and "PYTHONPATH" not in script  # never cd into site-packages, no made-up folder
    with pytest.raises(ConfigError, match=r"unknown attention backend 'bogus_attn'.*valid: .*torch_native"):
        launch.render_for(remote, variant("typo", attention_backend="bogus_attn"))


def test_facts_and_patches_meet_the_pip_installed_tree(real):
    r = inv_cmd("facts", "--host", "cpu-a", "--json")
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)
    assert facts["python"]["executable"] == str(sglang_cpu.venv_python())  # the server's python, not the system's
    assert facts["torch"]["version"].startswith("2.14.1+cu")  # with its local tag, as torch.__version__ says
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
    sb, remote = real
    seen: list[dict] = []
    res = launch.restart(remote, PROFILE, port=free_port(), on_progress=seen.append)
    assert res.ok and res.state == "healthy", (res.failure_line(), res.log_tail)
    print(f"\nrestart-to-healthy {res.waited_s:.1f}s")
    assert res.server_info_endpoint == "/server_info" and res.server_info["version"] == sglang_cpu.SGLANG_VERSION
    assert not res.mismatches and not res.unconfirmed, (res.mismatches, res.unconfirmed)
    for key in ("model_path", "device", "attention_backend", "grammar_backend", "max_total_tokens",
                "max_running_requests", "mem_fraction_static", "cuda_graph_backend_decode", "cuda_graph_backend_prefill"):
        assert key in res.confirmed, key
    assert any(ev.get("phase") == "waiting for /health" for ev in seen)
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


def test_a_misspelt_argument_is_caught_by_the_confirmation(real):
    """What the server runs is compared with what was asked: a value SGLang changes shows as a mismatch."""
    res = launch.RestartResult(host="cpu-a", profile=PROFILE, ok=True, state="healthy", port=1)
    confirm(res, {"max_running_requests": "8", "mem_fraction_static": "0.05", "no_such_arg": "1"},
                    {"max_running_requests": 4, "mem_fraction_static": 0.05})
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
    print(f"\nstop {time.monotonic() - t0:.1f}s ({stopped['took_s']:.1f}s on the host, {stopped['processes']} processes)")
    assert stopped["stopped"] and stopped["left"] == []
    still = {p: n for p, n in before.items() if Path(f"/proc/{p}").exists() and p in server_processes(pid)}
    assert not still and not server_processes(pid)
    assert port_free(port) and not launch.status(remote).running


# -- crash classes, end to end (the others: tests/test_real_server_crashes.py) ------------------------------------
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
