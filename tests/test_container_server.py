"""The REAL SGLang 0.5.23 CPU server inside containers on a host, reached over SSH + `docker exec`.

Both restart shapes, against the suite's own dockerd and the real server environment, bind-mounted read-only
at the same paths (nothing big is copied into an image):
(a) `container_restart: exec` (the default): a long-running container; sglops starts the server process
    inside it as on a host (`inv restart PROFILE --host H --container C`), then benches, reads its status and
    stops it;
(b) `container_restart: entrypoint`: the container's command IS the server; a restart is `docker restart` +
    a health wait from inside + the crash named from `docker logs`.
One container and one server per shape for the whole module (a real start takes 20-60 s here).
"""

from __future__ import annotations

import json
import shutil
import uuid

import pytest
from conftest import require_real_server_env
from real_server_host import PROFILE, cheaper_starts, variant_in

from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.launch import server as launch
from sglops.sandbox import docker, sglang_cpu
from sglops.sandbox.sshd import Sandbox
from tests.conftest import REPO, inv_cmd

pytestmark = pytest.mark.real_server


@pytest.fixture(scope="module")
def world(tmp_path_factory, dockerd):
    """A sandbox host (real sshd) whose `docker` talks to
    our daemon, the serving image, the profiles, the env."""
    require_real_server_env()
    base = tmp_path_factory.mktemp("ctr-server")
    profiles = base / "profiles"
    profiles.mkdir()
    shutil.copy(REPO / "playbooks" / "profiles" / f"{PROFILE}.yaml", profiles)
    cheaper_starts(profiles / f"{PROFILE}.yaml")
    image = docker.ensure_image(dockerd, serve=True)
    sb = Sandbox(base, [{"name": "gpu-host", "sglang_env": "cpu"}]).start()
    docker.docker_wrapper(dockerd, sb.host("gpu-host").bin)
    h = sb.host("gpu-host")
    names = {"exec": f"sglops-srv-{uuid.uuid4().hex[:6]}", "entry": f"sglops-ep-{uuid.uuid4().hex[:6]}"}
    # what an operator writes for a containerised host: the paths are the container's (here the bind mounts
    # put the real environment at the same paths as on this machine)
    sb.write_inventory(
        extra=[
            {
                "name": f"ctr-{k}",
                "address": "127.0.0.1",
                "port": h.client_port,
                "container": v,
                "python": h.python,
                "sglang_root": str(h.sglang_root),
                "vars": dict(h.vars),
            }
            for k, v in names.items()
        ]
    )
    env = {
        "SGLOPS_INVENTORY": str(sb.inventory),
        "SGLOPS_ARTIFACTS": str(base / "artifacts"),
        "SGLOPS_PROFILES": str(profiles),
    }
    try:
        yield {"sb": sb, "image": image, "env": env, "profiles": profiles, "dockerd": dockerd, "names": names}
    finally:
        sb.stop()


def variant(world, name: str, **changes) -> str:
    """A profile beside the repo's real one with some fields changed (None removes one)."""
    return variant_in(world["profiles"], name, **changes)


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
    assert json.loads(dry.stdout)["state"] == "dry-run" and processes(dockerd, exec_ctr) == [
        "/sbin/docker-init -- sleep infinity",
        "sleep infinity",
    ]
    r = inv_cmd("restart", PROFILE, *at, "--json", env=env)
    assert r.returncode == 0, (
        r.stdout[-3000:]
        + r.stderr[-3000:]
        + dockerd.docker(
            "exec", exec_ctr, "sh", "-c", "tail -n 30 /root/.local/state/sglops/*/server.log", check=False
        ).stdout.decode()
    )
    res = json.loads(r.stdout)
    print(f"\nrestart-to-healthy inside the container {res['waited_s']:.1f}s")
    assert res["state"] == "healthy" and res["server_info"]["version"] == sglang_cpu.SGLANG_VERSION
    assert not res["mismatches"] and not res["unconfirmed"]
    assert {"model_path", "device", "attention_backend", "max_total_tokens"} <= set(res["confirmed"])
    inside = " ".join(processes(dockerd, exec_ctr))
    # the server runs IN the container
    assert "sglang.launch_server" in inside and "sglang::scheduler" in inside
    # state in the container's filesystem
    assert res["log_path"].startswith("/root/.local/state/sglops/")
    assert dockerd.docker("exec", exec_ctr, "ls", res["log_path"], check=False).returncode == 0

    b = inv_cmd(
        "bench",
        *at,
        "--runs",
        "1",
        "--requests",
        "2",
        "--output-len",
        "16",
        "--input-len",
        "16",
        "--warmup",
        "0",
        "--json",
        env=env,
    )
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


# -- shape (b): the container's command is the server --------------------------------------------------------
def started_at(dockerd, name: str) -> str:
    return (
        dockerd.docker("inspect", "--format", "{{.State.StartedAt}} {{.State.Status}}", name)
        .stdout.decode()
        .strip()
    )


def create_server_container(world, name: str, profile: str) -> None:
    """`docker create` a container whose command is the profile's rendered server (not started: the first
    `inv restart` starts it, so no server start is spent on set-up)."""
    # same paths as in the image
    r = inv_cmd("render", profile, "--host", "gpu-host", "--json", env=world["env"])
    assert r.returncode == 0, r.stderr
    argv = json.loads(r.stdout)["argv"]
    args = ["create", "--init", "--name", name, "--network", "none", "-e", "SGLANG_USE_CPU_ENGINE=1"]
    # as the profile (cheaper_starts)
    args += [a for k, v in sglang_cpu.start_env().items() for a in ("-e", f"{k}={v}")]
    for src, dst in docker.serve_mounts():
        args += ["-v", f"{src}:{dst}:ro"]
    world["dockerd"].docker(*args, world["image"], *argv)


@pytest.fixture(scope="module")
def entry_ctr(world):
    name = world["names"]["entry"]
    profile = variant(world, "entry", container_restart="entrypoint")
    create_server_container(world, name, profile)
    yield name, profile
    world["dockerd"].docker("rm", "-f", name, check=False)


def test_entrypoint_shape_restart_status_logs_rollback_stop(world, entry_ctr):
    env, dockerd = world["env"], world["dockerd"]
    name, profile = entry_ctr
    at = ["--host", "ctr-entry"]
    before = started_at(dockerd, name)
    dry = inv_cmd("restart", profile, *at, "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["state"] == "dry-run" and plan["shape"] == "entrypoint"
    assert any(f"docker restart -t 15 {name}" in step for step in plan["plan"])
    # the dry run changed nothing
    assert started_at(dockerd, name) == before

    r = inv_cmd("restart", profile, *at, "--json", env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(r.stdout)
    print(f"\nentrypoint restart-to-healthy {res['waited_s']:.1f}s")
    assert res["state"] == "healthy" and res["shape"] == "entrypoint" and started_at(dockerd, name) != before
    assert not res["mismatches"] and {"model_path", "attention_backend", "max_total_tokens"} <= set(
        res["confirmed"]
    )

    st = inv_cmd("server-status", *at, "--json", env=env)
    assert st.returncode == 0, st.stderr
    doc = json.loads(st.stdout)
    assert doc["running"] and doc["health"] == 200 and doc["container"]["status"] == "running"
    assert doc["profile"] == profile and doc["server_info"]["attention_backend"] == "torch_native"
    lg = inv_cmd("logs", *at, "--lines", "400", env=env)
    # from `docker logs`
    assert lg.returncode == 0 and "fired up and ready to roll" in lg.stdout
    inv = load_inventory(world["sb"].inventory)
    # logs --follow: the engine's log, streamed
    with connect(inv.get("ctr-entry"), inventory=inv) as remote:
        seen: list[str] = []
        followed = launch.logs(remote, lines=5, follow=True, follow_s=2, on_line=seen.append)
    assert len(seen) >= 5 and followed.lines == seen and followed.path == f"docker logs {name}"

    # a profile the container does not run: refused in one line, nothing restarted
    other = variant(world, "entry-other", container_restart="entrypoint", max_running_requests=4)
    running = started_at(dockerd, name)
    bad = inv_cmd("restart", other, *at, env=env)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "does not run what profile entry-other renders" in bad.stderr
    assert "--max-running-requests: container runs '8', profile renders '4'" in bad.stderr
    assert started_at(dockerd, name) == running

    rb = inv_cmd("rollback", *at, env=env)
    assert (
        rb.returncode != 0 and "is the entrypoint of container" in rb.stderr and "Traceback" not in rb.stderr
    )

    dry = inv_cmd("stop", *at, "--dry-run", env=env)
    assert (
        dry.returncode == 0 and f"docker stop {name}" in dry.stdout and started_at(dockerd, name) == running
    )
    stop = inv_cmd("stop", *at, "--json", env=env)
    assert stop.returncode == 0, stop.stderr
    assert json.loads(stop.stdout)["stopped"] and started_at(dockerd, name).endswith("exited")
    st = json.loads(inv_cmd("server-status", *at, "--json", env=env).stdout)
    assert not st["running"] and st["container"]["status"] == "exited"
    assert [r["state"] for r in st["restarts"]][-2:] == ["healthy", "stopped"]


def test_entrypoint_crash_is_named_from_docker_logs(world):
    """A container whose command has an unknown attention backend: the crash is named from `docker logs`."""
    dockerd = world["dockerd"]
    name = f"sglops-crash-{uuid.uuid4().hex[:6]}"
    profile = variant(
        world,
        "entry-bad",
        container_restart="entrypoint",
        attention_backend=None,
        extra_args=["--attention-backend", "bogus_attn"],
    )
    create_server_container(world, name, profile)
    try:
        r = inv_cmd(
            "restart", profile, "--host", "ctr-entry", "--container", name, "--json", env=world["env"]
        )
        assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
        doc = json.loads(r.stdout)
        assert "unknown backend" in doc["error"] and "invalid choice: 'bogus_attn'" in doc["error"]
        assert f"docker logs {name}" in doc["error"] and "Traceback" not in r.stderr
        # nothing left running
        assert started_at(dockerd, name).endswith("exited")
    finally:
        dockerd.docker("rm", "-f", name, check=False)
