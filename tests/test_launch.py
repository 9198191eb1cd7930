"""Launch workflow on real sshd sandbox hosts: render per release, restart, crashes, rollback, hostile values.

The server is the sglops stand-in (the only stand-in), started through the rendered script.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from sglops.core.errors import ConfigError, SglopsError
from sglops.launch import server as launch
from sglops.launch.profiles import load_profile
from sglops.sandbox.sshd import free_port
from tests.conftest import REPO, inv_cmd


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """write(name, **fields) -> a profile in a private profiles folder (extends the repo's sandbox one)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    shutil.copy(REPO / "playbooks" / "profiles" / "sandbox.yaml", folder / "sandbox.yaml")
    monkeypatch.setenv("SGLOPS_PROFILES", str(folder))

    def write(name: str, **fields) -> str:
        doc = {"extends": "sandbox", "port": free_port(), "startup_timeout": 15, "stop_grace": 3, **fields}
        env = {"SGLOPS_STANDIN_STARTUP_S": "0.2", **fields.get("env", {})}
        doc["env"] = env
        doc["per_host"] = {}
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc))
        return name

    return write


@pytest.fixture
def clean_a(remote_a):
    yield remote_a
    launch.stop(remote_a, grace_s=1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


# -- render -----------------------------------------------------------------------------------
def test_render_follows_each_hosts_release(remote_a, remote_b, profiles):
    name = profiles("graphs", cuda_graph={"max_bs": 16}, dsa_decode_backend="flashmla_kv")
    a = launch.render_for(remote_a, name)
    b = launch.render_for(remote_b, name)
    assert (a.sglang_version, b.sglang_version) == ("0.5.23", "0.5.15")
    assert "--cuda-graph-max-bs-decode 16" in a.script and "--cuda-graph-max-bs 16" in b.script
    assert "--dsa-decode-backend flashmla_kv" in a.script
    assert a.argv[0] == "sglang-standin" and "PYTHONPATH=" in a.script


def test_unknown_backend_and_flag_are_refused_with_the_valid_choices(remote_a, profiles):
    with pytest.raises(ConfigError, match=r"unknown attention backend 'flashmla2'.*valid: .*trtllm_mla"):
        launch.render_for(remote_a, profiles("typo", attention_backend="flashmla2"))
    with pytest.raises(ConfigError, match=r"--cuda-graph-max-bs is not a launch argument of sglang 0.5.23"):
        launch.render_for(remote_a, profiles("old", extra_args=["--cuda-graph-max-bs", "8"]))
    r = inv_cmd("render", "typo", "--host", "gpu-a", env={"SGLOPS_PROFILES": os.environ["SGLOPS_PROFILES"]})
    assert r.returncode != 0 and "Traceback" not in r.stderr and "valid:" in r.stderr


def test_real_profiles_render_python_launch_server():
    out = launch.render_for(None, load_profile("glm5-nvfp4-sm120-trtllm_mla"))
    assert out.argv[1:3] == ["-m", "sglang.launch_server"] and "--attention-backend trtllm_mla" in out.script


def test_the_sandbox_profile_asks_sglang_to_sleep_when_idle():
    """An idle SGLang scheduler polls its sockets in a busy loop (a whole core each); the CPU sandbox says
    `--sleep-on-idle` (a flag of the release's own), and a profile that does not ask gets no flag."""
    out = launch.render_for(None, load_profile("sandbox-sglang-cpu"))
    assert out.argv.count("--sleep-on-idle") == 1
    assert "--sleep-on-idle" not in launch.render_for(None, load_profile("glm5-nvfp4-sm120-trtllm_mla")).argv


# -- restart ----------------------------------------------------------------------------------
def test_clean_restart_waits_for_health_confirms_args_and_replaces_the_old_server(clean_a, profiles):
    name = profiles("clean", kv_cache_dtype="fp8_e4m3", tp_size=2)
    seen: list[dict] = []
    first = launch.restart(clean_a, name, on_progress=seen.append)
    assert first.ok and first.state == "healthy", first.log_tail
    assert first.confirmed["tp_size"] == 2 and first.confirmed["kv_cache_dtype"] == "fp8_e4m3"
    assert not first.mismatches
    assert launch.server_info(clean_a)["standin"] is True
    st = launch.status(clean_a)
    assert st.running and st.pid == first.pid and st.health == 200
    second = launch.restart(clean_a, name)
    assert second.ok and second.stopped_pid == first.pid and second.stop_signal == "TERM"
    assert not alive(first.pid) and alive(second.pid)
    assert any(ev.get("phase") == "starting" for ev in seen)


def test_dry_run_changes_nothing(clean_a, profiles):
    name = profiles("dry")
    up = launch.restart(clean_a, name)
    plan = launch.restart(clean_a, name, dry_run=True)
    assert plan.dry_run and not plan.ok and f"stop pid {up.pid}" in plan.plan[0]
    assert "exec" in plan.script
    assert alive(up.pid) and launch.status(clean_a).pid == up.pid


def test_restart_and_stop_dry_runs_are_the_host_scripts_own_plan(clean_a, profiles):
    """The plan comes from the host's state (server_restart.py plan=True), so it sees what the laptop cannot:
    a port held by a process sglops did not start (nothing would be started), the server sglops runs there
    now."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        plan = launch.restart(clean_a, profiles("dry-taken"), port=port, dry_run=True)
        assert plan.dry_run and plan.plan[-1].startswith(f"start nothing: port {port} on "), plan.plan
    up = launch.restart(clean_a, profiles("dry-stop"))
    ans = launch.stop(clean_a, dry_run=True)
    assert ans["plan"] == [
        f"stop pid {up.pid} (profile dry-stop, port {up.port}): TERM its process group and tree, "
        "KILL after 20s"
    ]
    assert alive(up.pid) and launch.status(clean_a).pid == up.pid


@pytest.mark.parametrize("kind,cls", [("static_assert", "static_assert"), ("oom", "cuda_oom")])
def test_crash_during_startup_is_caught_and_named(clean_a, profiles, kind, cls):
    res = launch.restart(clean_a, profiles(f"crash-{kind}", env={"SGLOPS_STANDIN_FAIL": kind}))
    assert not res.ok and res.state == "died" and res.failure == cls
    assert res.waited_s < 10 and res.log_tail and res.hint
    assert not launch.status(clean_a).running


def test_inv_restart_failure_is_one_line_and_nonzero(use_sandbox, profiles):
    name = profiles("crash-tb", env={"SGLOPS_STANDIN_FAIL": "traceback"})
    r = inv_cmd("restart", name, "--host", "gpu-a", env={"SGLOPS_PROFILES": os.environ["SGLOPS_PROFILES"]})
    assert r.returncode != 0
    assert "Python traceback (python_traceback)" in r.stderr and "Traceback (most recent" not in r.stderr
    # the log tail is shown
    assert "RuntimeError: expected mat1" in r.stdout


def test_slow_start_shows_progress_and_a_timeout_stops_it(clean_a, profiles):
    seen: list[dict] = []
    slow = launch.restart(
        clean_a, profiles("slow", env={"SGLOPS_STANDIN_STARTUP_S": "1.2"}), on_progress=seen.append
    )
    assert slow.ok and slow.waited_s >= 1.1
    assert any(ev.get("phase") == "waiting for /health" and ev.get("health") == 503 for ev in seen)
    late = launch.restart(clean_a, profiles("late", env={"SGLOPS_STANDIN_STARTUP_S": "30"}), timeout=1)
    assert not late.ok and late.state == "timeout" and late.failure == "timeout"
    assert not alive(late.pid)


def test_port_already_in_use(clean_a, profiles):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        res = launch.restart(clean_a, profiles("busy"), port=port)
    assert not res.ok and res.failure == "port_in_use"


def test_rollback_brings_back_the_last_healthy_script(clean_a, profiles):
    good = launch.restart(clean_a, profiles("good", kv_cache_dtype="bf16"))
    assert good.ok
    bad = launch.restart(
        clean_a, profiles("bad", kv_cache_dtype="fp8_e4m3", env={"SGLOPS_STANDIN_FAIL": "oom"})
    )
    assert not bad.ok
    with pytest.raises(SglopsError, match="last script that came up healthy is profile 'good'"):
        launch.restart(clean_a, "bad", rollback=True)
    back = launch.restart(clean_a, "good", rollback=True)
    assert back.ok and back.profile == "good"
    assert launch.server_info(clean_a)["kv_cache_dtype"] == "bf16"
    r = inv_cmd("rollback", "--host", "gpu-a")
    assert r.returncode == 0, r.stderr
    assert launch.server_info(clean_a)["kv_cache_dtype"] == "bf16"


def test_stop_falls_back_to_kill_when_term_is_ignored(clean_a, profiles):
    name = profiles("stubborn", stop_grace=1, env={"SGLOPS_STANDIN_IGNORE_TERM": "1"})
    first = launch.restart(clean_a, name)
    second = launch.restart(clean_a, name)
    assert second.stopped_pid == first.pid and second.stop_signal == "KILL" and not alive(first.pid)


def test_hostile_model_path_reaches_the_server_literally_and_never_runs(clean_a, profiles, tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"/models/my model $(touch {marker}) `touch {marker}`; touch {marker} 'q\" end"
    res = launch.restart(clean_a, profiles("hostile", model_path=hostile, served_model_name="x y"))
    assert res.ok, res.log_tail
    assert launch.server_info(clean_a)["model_path"] == hostile
    assert res.confirmed["model_path"] == hostile
    time.sleep(0.2)
    assert not marker.exists()


def test_server_status_and_logs_via_inv(clean_a, use_sandbox, profiles):
    name = profiles("status")
    up = launch.restart(clean_a, name)
    env = {"SGLOPS_PROFILES": os.environ["SGLOPS_PROFILES"]}
    st = inv_cmd("server-status", "--host", "gpu-a", "--json", env=env)
    assert st.returncode == 0 and f'"pid": {up.pid}' in st.stdout and '"health": 200' in st.stdout
    lg = inv_cmd("logs", "--host", "gpu-a", "--lines", "5", env=env)
    assert lg.returncode == 0 and "fired up and ready to roll" in lg.stdout
    followed: list[str] = []
    poke = threading.Timer(
        0.5,
        lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{up.port}/get_model_info?follow-marker", timeout=5
        ).read(),
    )
    poke.start()
    launch.logs(clean_a, lines=3, follow=True, follow_s=1.5, on_line=followed.append)
    poke.join()
    assert len(followed) > 3 and any("follow-marker" in ln for ln in followed[3:])


def test_restart_refuses_an_unknown_profile_before_touching_a_host(use_sandbox):
    r = inv_cmd("restart", "nope", "--host", "gpu-a")
    assert r.returncode != 0 and "no server profile 'nope'" in r.stderr and "sandbox" in r.stderr
    with pytest.raises(SglopsError):
        launch.check_restart_args(None, False)


def test_a_token_in_a_profile_never_shows_in_what_sglops_prints_or_keeps(use_sandbox, profiles, tmp_path):
    from conftest import inv_cmd

    token = "hf_planted_token_for_the_leak_test_7781"
    name = profiles("secret", env={"HF_TOKEN": token})
    env = {
        "SGLOPS_INVENTORY": str(use_sandbox.inventory),
        "SGLOPS_ARTIFACTS": str(tmp_path / "art"),
        "SGLOPS_PROFILES": os.environ.get("SGLOPS_PROFILES", ""),
    }
    res = inv_cmd("render", name, "--host", "gpu-a", env=env)
    assert res.returncode == 0, res.stderr
    assert "HF_TOKEN" in res.stdout and token not in res.stdout + res.stderr
    res = inv_cmd("restart", name, "--host", "gpu-a", "--dry-run", "--json", env=env)
    assert token not in res.stdout + res.stderr
    for path in (tmp_path / "art").rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path


def test_the_real_cpu_profile_is_the_servers_own_flags_and_takes_the_model_from_the_host():
    """sandbox-sglang-cpu.yaml says in profile form what sglops.sandbox.sglang_cpu starts by hand."""
    from dataclasses import replace

    from sglops.core.hosts import Host
    from sglops.sandbox import sglang_cpu

    offline = launch.render_for(None, "sandbox-sglang-cpu")
    assert "{vars.model_dir}" in offline.argv and any("left as written" in w for w in offline.warnings)
    host = Host(
        name="cpu-x", address="127.0.0.1", python="/venv/bin/python", vars={"model_dir": "/models/tiny"}
    )
    r = launch.render(load_profile("sandbox-sglang-cpu"), host)
    flags = sglang_cpu.SERVER_FLAGS
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        assert r.argv[r.argv.index(flag) + 1] == value, flag
    assert all(flag in r.argv for flag in sglang_cpu.IDLE_FLAGS)
    assert r.argv[:3] == ["/venv/bin/python", "-m", "sglang.launch_server"]
    assert r.argv[r.argv.index("--model-path") + 1] == "/models/tiny"
    for name, value in sglang_cpu.SERVER_ENV.items():
        assert f"export {name}={value}" in r.script
    assert r.expected["cuda_graph_backend_decode"] == "disabled" and r.expected["max_running_requests"] == "8"
    with pytest.raises(
        ConfigError, match=r"model_path refers to \{vars.model_dir\} but host cpu-y has no var"
    ):
        launch.render(load_profile("sandbox-sglang-cpu"), replace(host, name="cpu-y", vars={}))
