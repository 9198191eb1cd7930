"""The remote layer against real sshd hosts: quoting, scripts, timeouts, host keys, errors, secrets."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time

import pytest

from sglops.core import redact
from sglops.core.errors import ConnectError, HostKeyError, RemoteError, RemoteTimeout
from sglops.core.hosts import load_inventory
from sglops.core.parallel import on_hosts
from sglops.core.remote import connect, fingerprint


def test_arguments_reach_the_host_literally(remote_a, tmp_path):
    hostile = "$(touch /tmp/sglops-pwned) `id` ; rm -rf / 'quoted' \"dq\" \\ end"
    out = remote_a.run(["printf", "%s", hostile]).stdout
    assert out == hostile
    assert not os.path.exists("/tmp/sglops-pwned")


def test_script_runs_in_one_round_trip_and_answers_json(remote_a):
    before = remote_a.round_trips
    facts = remote_a.run_py("facts", {"sglang_root": remote_a.host.sglang_root})
    assert remote_a.round_trips == before + 1
    assert facts["sglang"]["version"] == "0.5.23"
    # the host's own stdlib python
    assert facts["python"]["executable"] == "/usr/bin/python3"


def test_sglang_not_found_says_where_it_looked_and_how_to_fix(remote_a):
    facts = remote_a.run_py("facts", {"sglang_root": "/nonexistent"})
    assert facts["sglang"] is None
    assert "SGLang not found at /nonexistent" in facts["sglang_error"]
    assert "--sglang-root" in facts["sglang_error"]


def test_broken_remote_script_is_a_one_line_error(remote_a):
    remote_a.python = "/no/such/python3"
    with pytest.raises(
        RemoteError, match=r"gpu-a: remote step facts gave no answer .*python: /no/such/python3"
    ):
        remote_a.run_py("facts", {})


def test_failed_command_names_exit_code_and_error(remote_a):
    with pytest.raises(RemoteError, match=r"`ls /no/such/dir` exited 2: .*No such file"):
        remote_a.run(["ls", "/no/such/dir"])
    result = remote_a.run(["ls", "/no/such/dir"], check=False)
    assert result.exit_code == 2


def test_timeout_stops_the_remote_process(remote_a):
    start = time.monotonic()
    with pytest.raises(RemoteTimeout, match="timed out after 1 s"):
        remote_a.run(["sleep", "31.4159"], timeout=1)
    assert time.monotonic() - start < 5
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", "sleep 31.4159"], capture_output=True, text=True).stdout
    assert left.strip() == "", "the timed-out command must not keep running on the host"


def test_put_and_get_are_atomic_copies(remote_a, tmp_path):
    src = tmp_path / "launch.sh"
    src.write_bytes(os.urandom(300_000))
    dest = f"{remote_a.host.sglang_root}/.sglops-test/launch.sh"
    remote_a.run(["mkdir", "-p", os.path.dirname(dest)])
    try:
        remote_a.put(src, dest)
        back = tmp_path / "back.sh"
        remote_a.get(dest, back)
        assert back.read_bytes() == src.read_bytes()
        assert not list(tmp_path.glob("*.part"))
    # the tree is the session's shared sandbox tree: later tests check it is clean (git status)
    finally:
        remote_a.run(["rm", "-rf", os.path.dirname(dest)])


def _host(sandbox, name, **changes):
    inv = load_inventory(sandbox.inventory)
    return dataclasses.replace(inv.get(name), **changes), inv


def test_unknown_host_key_is_refused_with_its_fingerprint(use_sandbox, tmp_path):
    empty = tmp_path / "known_hosts"
    host, inv = _host(use_sandbox, "gpu-a", known_hosts=str(empty))
    with pytest.raises(HostKeyError) as err:
        connect(host, inventory=inv).run(["true"])
    msg = str(err.value)
    assert "unknown host key" in msg and "SHA256:" in msg and "--accept-new-host-key" in msg
    expected = subprocess.run(
        ["ssh-keygen", "-lf", str(use_sandbox.host("gpu-a").home / "ssh_host_ed25519_key.pub")],
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    assert expected in msg, "the fingerprint shown must be the one ssh-keygen shows"
    assert not empty.exists(), "refusing must not save anything"


def test_accept_new_saves_the_key_and_then_it_is_known(use_sandbox, tmp_path):
    path = tmp_path / "known_hosts"
    host, inv = _host(use_sandbox, "gpu-a", known_hosts=str(path))
    with connect(host, accept_new_host_key=True, inventory=inv) as r:
        r.run(["true"])
    assert f"[127.0.0.1]:{host.port} ssh-ed25519" in path.read_text()
    # no flag needed any more
    with connect(host, inventory=inv) as r:
        assert r.run(["echo", "ok"]).stdout.strip() == "ok"


def test_changed_host_key_is_always_refused(use_sandbox, tmp_path):
    # known_hosts holds gpu-b's key under gpu-a's address: exactly what a changed key looks like.
    a, b = use_sandbox.host("gpu-a"), use_sandbox.host("gpu-b")
    path = tmp_path / "known_hosts"
    path.write_text(b.host_key_line().replace(f"]:{b.client_port} ", f"]:{a.client_port} "))
    host, inv = _host(use_sandbox, "gpu-a", known_hosts=str(path))
    for accept in (False, True):
        with pytest.raises(HostKeyError, match="CHANGED"):
            connect(host, accept_new_host_key=accept, inventory=inv).run(["true"])


def test_unreachable_host_fails_within_the_connect_timeout(use_sandbox):
    a = use_sandbox.host("gpu-a")
    host, inv = _host(use_sandbox, "gpu-a", connect_timeout=1.0)
    # sshd frozen: TCP accepts, no SSH banner ever comes
    a.pause()
    try:
        start = time.monotonic()
        with pytest.raises(ConnectError, match="gpu-a: cannot"):
            connect(host, inventory=inv).run(["true"])
        assert time.monotonic() - start < 4
    finally:
        a.resume()


def test_refused_port_and_refused_auth_are_one_line(use_sandbox, tmp_path):
    host, inv = _host(use_sandbox, "gpu-a", port=1)
    with pytest.raises(ConnectError, match=r"cannot reach .*:1: .*refused"):
        connect(host, inventory=inv).run(["true"])
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    host, inv = _host(use_sandbox, "gpu-a", identity_file=str(stranger))
    os.environ.pop("SSH_AUTH_SOCK", None)
    with pytest.raises(ConnectError, match="authentication refused"):
        connect(host, inventory=inv).run(["true"])


def test_secrets_never_appear_in_errors_or_artifacts(remote_a, tmp_path):
    from sglops.core import artifacts

    secret = "hf_SGLOPS_planted_secret_4242"
    redact.register(secret)
    with pytest.raises(RemoteError) as err:
        remote_a.run(["sh", "-c", f"echo token={secret} >&2; exit 3"])
    assert secret not in str(err.value) and "****" in str(err.value)
    path = artifacts.write_json(
        tmp_path / "a.json", {"env": {"HF_TOKEN": "abc-def-ghi"}, "note": f"x {secret}"}
    )
    text = path.read_text()
    assert secret not in text and "abc-def-ghi" not in text


def test_gateway_reaches_a_host_through_another(use_sandbox, tmp_path):
    b = use_sandbox.host("gpu-b")
    use_sandbox.write_inventory(
        extra=[
            {
                "name": "behind-a",
                "address": "127.0.0.1",
                "port": b.client_port,
                "gateway": "gpu-a",
                "sglang_root": str(b.sglang_root),
            }
        ]
    )
    try:
        inv = load_inventory(use_sandbox.inventory)
        with connect(inv.get("behind-a"), inventory=inv) as r:
            facts = r.run_py("facts", {"sglang_root": r.host.sglang_root})
        assert facts["sglang"]["version"] == "0.5.15"
    finally:
        use_sandbox.write_inventory()


def test_one_failing_host_never_hides_the_others(use_sandbox):
    inv = load_inventory(use_sandbox.inventory)
    hosts = [inv.get("gpu-a"), dataclasses.replace(inv.get("gpu-b"), port=1), inv.get("gpu-b")]
    outcomes = on_hosts(hosts, lambda r: r.run(["hostname"]).stdout.strip(), inventory=inv)
    assert [o.ok for o in outcomes] == [True, False, True]
    assert "refused" in outcomes[1].error


def test_fingerprint_matches_openssh_format(use_sandbox):
    import paramiko

    key = paramiko.Ed25519Key.from_private_key_file(
        str(use_sandbox.host("gpu-a").home / "ssh_host_ed25519_key")
    )
    assert fingerprint(key).startswith("SHA256:") and len(fingerprint(key)) == 50
