"""SGLang inside a container on the GPU host: every step through SSH + `docker exec`, against a real dockerd.

The suite starts its own dockerd (`--iptables=false --ip-forward=false --bridge=none`, its own socket and
exec-root: the machine's networking is untouched), builds the sandbox image from files already on this machine
(no registry), and runs containers with `--network none`. The sandbox host is a real sshd on loopback whose
`docker` talks to that daemon, so the path is the operator's:
laptop -> SSH -> host -> docker exec -> container.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import uuid

import pytest
from conftest import inv_cmd

from sglops.core.errors import RemoteError, RemoteTimeout
from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.sandbox import docker

SITE_TREE = f"{docker.SITE}/sglang"
MLA = f"{SITE_TREE}/srt/layers/attention/flashinfer_mla_backend.py"


@pytest.fixture(scope="module")
def image(dockerd):
    return docker.ensure_image(dockerd)


@pytest.fixture(scope="module")
def csb(make_sandbox, dockerd, image):
    """A sandbox GPU host with a container `sglang` of the
    image; inventory host `ctr` targets the container."""
    sb = make_sandbox([{"name": "ctr-host", "sglang": "0.5.23", "flashinfer": "0.7.2"}], name="container")
    docker.docker_wrapper(dockerd, sb.host("ctr-host").bin)
    sb.cname = f"sglops-ctr-{uuid.uuid4().hex[:6]}"
    docker.run_container(dockerd, image, sb.cname)
    h = sb.host("ctr-host")
    sb.write_inventory(
        extra=[
            {
                "name": "ctr",
                "address": "127.0.0.1",
                "port": h.port,
                "container": sb.cname,
                "sglang_root": SITE_TREE,
                "python": "python3",
                "tags": ["container"],
            }
        ]
    )
    yield sb
    dockerd.docker("rm", "-f", sb.cname, check=False)


@pytest.fixture
def env(csb, monkeypatch, tmp_path):
    e = {"SGLOPS_INVENTORY": str(csb.inventory), "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")}
    for k, v in e.items():
        monkeypatch.setenv(k, v)
    return e


def in_container(dockerd, csb, *argv: str) -> subprocess.CompletedProcess:
    return dockerd.docker("exec", csb.cname, *argv, check=False)


def open_ctr(csb):
    inv = load_inventory(csb.inventory)
    return connect(inv.get("ctr"), inventory=inv)


def test_facts_describe_the_container_not_the_host(env, csb, dockerd):
    res = inv_cmd("facts", "--host", "ctr", "--json", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    inspect = dockerd.docker("inspect", "--format", "{{.Id}} {{.Image}}", csb.cname).stdout.decode().split()
    assert doc["container"] == {"id": inspect[0], "image": inspect[1]}
    # the image's python
    assert doc["python"]["executable"] in ("/usr/bin/python3", "/usr/bin/python3.11")
    assert doc["sglang"]["package_dir"] == SITE_TREE
    host = json.loads(inv_cmd("facts", "--host", "ctr-host", "--json", env=env).stdout)
    assert host["container"] is None and doc["hostname"] == inspect[0][:12] != host["hostname"]


def test_probe_reads_the_tree_inside_the_container(env):
    res = inv_cmd("probe-backends", "--host", "ctr", "--json", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    text = json.dumps(doc)
    assert "flashinfer_mla_backend.py" in text and SITE_TREE in text


def test_patch_apply_and_revert_inside_the_container(env, csb, dockerd):
    before = in_container(dockerd, csb, "cat", MLA)
    assert before.returncode == 0 and b"get_key_buffer(layer.layer_id).to(q.dtype)" in before.stdout
    res = inv_cmd("apply-patch", "gather-cast", "--host", "ctr", "--json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    after = in_container(dockerd, csb, "cat", MLA)
    assert after.stdout != before.stdout and b"sglops: gather-cast" in after.stdout
    # the host's own filesystem is untouched: state lives in the container's tree
    assert not list(csb.host("ctr-host").home.rglob(".sglops"))
    res = inv_cmd("patches", "--host", "ctr", "--json", env=env)
    assert res.returncode == 0 and '"applied"' in res.stdout
    res = inv_cmd("revert-patch", "gather-cast", "--host", "ctr", "--json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert in_container(dockerd, csb, "cat", MLA).stdout == before.stdout


def test_a_recreated_container_says_its_patches_are_gone(env, csb, dockerd, image):
    res = inv_cmd("apply-patch", "gather-cast", "--host", "ctr", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    old = dockerd.docker("inspect", "--format", "{{.Id}}", csb.cname).stdout.decode().strip()
    # what a redeploy does: a new container from the same image
    dockerd.docker("rm", "-f", csb.cname)
    docker.run_container(dockerd, image, csb.cname)
    res = inv_cmd("patches", "--host", "ctr", "--json", env=env)
    assert res.returncode == 0, res.stderr
    row = next(r for r in json.loads(res.stdout)["patches"] if r["patch"] == "gather-cast")
    assert row["status"] == "gone" and old[:12] in row["detail"] and "recreated" in row["detail"]
    # and it can be applied again
    res = inv_cmd("apply-patch", "gather-cast", "--host", "ctr", "--json", env=env)
    assert res.returncode == 0 and json.loads(res.stdout)["ledger_entry"]["container"]["id"] != old
    assert inv_cmd("revert-patch", "gather-cast", "--host", "ctr", env=env).returncode == 0


def test_files_in_and_out_through_the_exec_stream(env, csb, tmp_path):
    blob = os.urandom(300_000) + b"\x00\xff" * 1000
    src = tmp_path / "blob.bin"
    src.write_bytes(blob)
    back = tmp_path / "back" / "blob.bin"
    with open_ctr(csb) as r:
        r.put(src, "/tmp/sglops-in/blob.bin")
        r.get("/tmp/sglops-in/blob.bin", back)
        listing = r.run(["ls", "-a", "/tmp/sglops-in"]).stdout.split()
    assert back.read_bytes() == blob
    # renamed into place, no temp file left
    assert listing == [".", "..", "blob.bin"]


def test_a_timed_out_step_leaves_no_process_inside(env, csb, dockerd):
    # a duration no other process has
    marker = f"sleep {300 + uuid.uuid4().int % 10_000}"
    with open_ctr(csb) as r:
        start = time.monotonic()
        with pytest.raises(RemoteTimeout):
            r.run(["sh", "-c", f"{marker}; echo never"], timeout=2)
        assert time.monotonic() - start < 20
    ps = in_container(dockerd, csb, "ps", "-eo", "args").stdout.decode()
    assert marker not in ps
    # a Python step too: the bootstrap runs under `timeout` inside
    with open_ctr(csb) as r:
        with pytest.raises(RemoteTimeout):
            r.run(["python3", "-c", "import time; time.sleep(300)"], timeout=2)
    assert "time.sleep(300)" not in in_container(dockerd, csb, "ps", "-eo", "args").stdout.decode()


def test_a_stopped_container_is_one_clear_line(env, csb, dockerd, image):
    name = f"sglops-gone-{uuid.uuid4().hex[:6]}"
    h = csb.host("ctr-host")
    inv = load_inventory(csb.inventory)
    from dataclasses import replace

    host = replace(inv.get("ctr"), name="gone", container=name)
    with connect(host, inventory=inv) as r:
        with pytest.raises(RemoteError, match=f"container '{name}' is not running on the host"):
            r.run_py("facts", {})
    # the SSH side was fine
    assert h.port


def test_identity_is_passed_in_the_same_round_trip(env, csb):
    with open_ctr(csb) as r:
        before = r.round_trips
        out = r.run(["sh", "-c", 'echo "$SGLOPS_CONTAINER"']).stdout.split()
        assert r.round_trips == before + 1
    assert len(out) == 2 and out[1].startswith("sha256:")


def test_quoting_survives_both_shells(env, csb):
    nasty = "a b'c\"d$(echo no)`echo no`;|&*"
    with open_ctr(csb) as r:
        out = r.run(["printf", "%s", nasty]).stdout
        payload = r.run(["base64"], stdin=nasty.encode()).stdout
    assert out == nasty and base64.b64decode(payload).decode() == nasty


def test_container_flag_on_a_host_and_on_local(env, csb, dockerd):
    """`--container NAME` targets a container of the host
    given by --host, also `--host local` on the GPU host."""
    cid = dockerd.docker("inspect", "--format", "{{.Id}}", csb.cname).stdout.decode().strip()
    res = inv_cmd("facts", "--host", "ctr-host", "--container", csb.cname, "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["container"]["id"] == cid
    res = inv_cmd(
        "facts",
        "--host",
        "local",
        "--container",
        csb.cname,
        "--json",
        env={**env, "DOCKER_HOST": dockerd.host},
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["container"]["id"] == cid and doc["hostname"] == cid[:12]
    res = inv_cmd("facts", "--host", "local", "--container", "bad/name", env=env)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "container" in res.stderr


def test_container_restart_is_a_checked_profile_field(tmp_path, monkeypatch):
    """The restart shape is a profile field: a bad value is one line; entrypoint without a container too."""
    from sglops.launch.profiles import load_profile

    monkeypatch.setenv("SGLOPS_PROFILES", str(tmp_path))
    (tmp_path / "sideways.yaml").write_text("model_path: /m\ncontainer_restart: sideways\n")
    res = inv_cmd(
        "restart", "sideways", "--host", "local", "--dry-run", env={"SGLOPS_PROFILES": str(tmp_path)}
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "container_restart must be one of exec, entrypoint (got 'sideways')" in res.stderr
    (tmp_path / "ep.yaml").write_text("model_path: /m\ncontainer_restart: entrypoint\n")
    assert load_profile("ep").container_restart == "entrypoint"
    res = inv_cmd("restart", "ep", "--host", "local", "--dry-run", env={"SGLOPS_PROFILES": str(tmp_path)})
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1
    assert "container_restart: entrypoint needs a container target" in res.stderr
