"""The REAL SGLang 0.5.23 CPU server inside containers on a host, reached over SSH + `docker exec`.

Both restart shapes, against the suite's own dockerd and the real server environment, bind-mounted read-only
at the same paths (nothing big is copied into an image):
(a) `container_restart: exec` (the default): a long-running container; sglops starts the server process inside
    it as on a host (`inv restart PROFILE --host H --container C`), then benches, reads its status and stops it;
(b) `container_restart: entrypoint`: the container's command IS the server; a restart is `docker restart` +
    a health wait from inside + the crash named from `docker logs`.
One container and one server per shape for the whole module (a real start takes 20-60 s here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from sglops.sandbox import docker, sglang_cpu
from sglops.sandbox.sshd import Sandbox
from tests.conftest import REPO, inv_cmd

PROFILE = "sandbox-sglang-cpu"
pytestmark = pytest.mark.real_server


@pytest.fixture(scope="module")
def dockerd():
    reason = docker.available()
    if reason:
        pytest.skip(f"no Docker daemon can start here: {reason}")
    root = Path(f"/tmp/sglops-dockerd-{uuid.uuid4().hex[:8]}")  # short: unix socket paths have a length limit
    try:
        daemon = docker.Dockerd(root).start()
    except Exception as exc:  # noqa: BLE001 (skipping needs the one reason, whatever it is)
        pytest.skip(f"no Docker daemon can start here: {exc}")
    yield daemon
    daemon.stop()
    subprocess.run(["rm", "-rf", str(root)], check=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory, dockerd):
    """A sandbox host (real sshd) whose `docker` talks to our daemon, the serving image, the profiles, the env."""
    reason = sglang_cpu.not_ready()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"real-server tier: {reason}")
        pytest.skip(f"real-server tier: {reason}")
    base = tmp_path_factory.mktemp("ctr-server")
    profiles = base / "profiles"
    profiles.mkdir()
    shutil.copy(REPO / "playbooks" / "profiles" / f"{PROFILE}.yaml", profiles)
    image = docker.ensure_image(dockerd, serve=True)
    sb = Sandbox(base, [{"name": "gpu-host", "sglang_env": "cpu"}]).start()
    docker.docker_wrapper(dockerd, sb.host("gpu-host").bin)
    h = sb.host("gpu-host")
    names = {"exec": f"sglops-srv-{uuid.uuid4().hex[:6]}", "entry": f"sglops-ep-{uuid.uuid4().hex[:6]}"}
    # what an operator writes for a containerised host: the paths are the container's (here the bind mounts
    # put the real environment at the same paths as on this machine)
    sb.write_inventory(extra=[{"name": f"ctr-{k}", "address": "127.0.0.1", "port": h.client_port, "container": v,
                               "python": h.python, "sglang_root": str(h.sglang_root), "vars": dict(h.vars)}
                              for k, v in names.items()])
    env = {"SGLOPS_INVENTORY": str(sb.inventory), "SGLOPS_ARTIFACTS": str(base / "artifacts"),
           "SGLOPS_PROFILES": str(profiles)}
    try:
        yield {"sb": sb, "image": image, "env": env, "profiles": profiles, "dockerd": dockerd, "names": names}
    finally:
        sb.stop()


def variant(world, name: str, **changes) -> str:
    """A profile beside the repo's real one with some fields changed (None removes one)."""
    doc = yaml.safe_load((world["profiles"] / f"{PROFILE}.yaml").read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    doc["per_host"] = {}
    (world["profiles"] / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return name


def processes(dockerd, name: str) -> list[str]:
    """Every process in the container (`ps` inside it), its command lines."""
    out = dockerd.docker("exec", name, "ps", "-eo", "args").stdout.decode().splitlines()[1:]
    return [ln.strip() for ln in out if ln.strip() and not ln.strip().startswith("ps ")]


# -- shape (a): sglops starts the server inside a long-running container ------------------------------------
@pytest.fixture(scope="module")
def exec_ctr(world):
    name = world["names"]["exec"]
    docker.run_container(world["dockerd"], world["image"], name, mounts=docker.serve_mounts())
    yield name
    world["dockerd"].docker("rm", "-f", name, check=False)


def test_exec_shape_restart_bench_status_stop(world, exec_ctr):
    env, dockerd = world["env"], world["dockerd"]
    at = ["--host", "ctr-exec", "--container", exec_ctr]
    dry = inv_cmd("restart", PROFILE, *at, "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["state"] == "dry-run" and processes(dockerd, exec_ctr) == ["/sbin/docker-init -- sleep infinity", "sleep infinity"]
    r = inv_cmd("restart", PROFILE, *at, "--json", env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + dockerd.docker(
        "exec", exec_ctr, "sh", "-c", "tail -n 30 /root/.local/state/sglops/*/server.log", check=False).stdout.decode()
    res = json.loads(r.stdout)
    print(f"\nrestart-to-healthy inside the container {res['waited_s']:.1f}s")
    assert res["state"] == "healthy" and res["server_info"]["version"] == sglang_cpu.SGLANG_VERSION
    assert not res["mismatches"] and not res["unconfirmed"]
    assert {"model_path", "device", "attention_backend", "max_total_tokens"} <= set(res["confirmed"])
    inside = " ".join(processes(dockerd, exec_ctr))
    assert "sglang.launch_server" in inside and "sglang::scheduler" in inside  # the server runs IN the container
    assert res["log_path"].startswith("/root/.local/state/sglops/")  # state in the container's filesystem
    assert dockerd.docker("exec", exec_ctr, "ls", res["log_path"], check=False).returncode == 0

    b = inv_cmd("bench", *at, "--runs", "1", "--requests", "2", "--output-len", "16", "--input-len", "16",
                "--warmup", "0", "--json", env=env)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    level = json.loads(b.stdout)["levels"][0]
    assert level["status"] == "ok" and level["requests"] == 2 and level["decode_tok_s"]["median"] > 0

    s = inv_cmd("server-status", *at, "--json", env=env)
    assert s.returncode == 0, s.stderr
    st = json.loads(s.stdout)
    assert st["running"] and st["health"] == 200 and st["server_info"]["attention_backend"] == "torch_native"
    lg = inv_cmd("logs", *at, "--lines", "400", env=env)
    assert lg.returncode == 0 and "fired up and ready to roll" in lg.stdout

    stop = inv_cmd("stop", *at, "--json", env=env)
    assert stop.returncode == 0, stop.stderr
    assert processes(dockerd, exec_ctr) == ["/sbin/docker-init -- sleep infinity", "sleep infinity"]
