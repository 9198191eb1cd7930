"""Host keys on every hop: a target reached through a jump host (ssh_config ProxyJump or inventory gateway).

Two real sshd on loopback: gpu-a is the jump host, gpu-b the target, named by aliases in a temporary
ssh_config (SGLOPS_SSH_CONFIG, read like `ssh -F`; the real ~/.ssh is never touched). Every hop's key is
checked against known_hosts like the final host's: unknown is refused unless --accept-new-host-key (then
saved), changed is always refused; a refused connection leaves no socket or thread behind.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import threading
import time

import paramiko
import pytest

from sglops.core.errors import ConfigError, ConnectError, HostKeyError
from sglops.core.hosts import Host, load_inventory
from sglops.core.remote import connect
from sglops.sandbox.sshd import HOST_PYTHON
from tests.conftest import inv_cmd


@pytest.fixture
def jump(use_sandbox, tmp_path, monkeypatch):
    """An ssh_config with `sbx-target` behind `ProxyJump sbx-jump`, and an empty known_hosts."""
    a, b = use_sandbox.host("gpu-a"), use_sandbox.host("gpu-b")
    config = tmp_path / "ssh_config"
    common = (
        f"    HostName 127.0.0.1\n    User {getpass.getuser()}\n    IdentityFile {use_sandbox.client_key}\n"
    )
    config.write_text(
        f"Host sbx-jump\n    Port {a.client_port}\n{common}\n"
        f"Host sbx-target\n    Port {b.client_port}\n{common}    ProxyJump sbx-jump\n"
    )
    monkeypatch.setenv("SGLOPS_SSH_CONFIG", str(config))
    known = tmp_path / "known_hosts"
    target = Host(
        name="sbx-target",
        address="sbx-target",
        known_hosts=str(known),
        python=HOST_PYTHON,
        sglang_root=str(b.sglang_root),
        connect_timeout=5,
    )
    return {"a": a, "b": b, "known": known, "target": target}


def transports_and_sockets() -> tuple[int, int]:
    """Paramiko transport threads alive and sockets open in this process: what a leak would leave."""
    time.sleep(0.3)
    threads = sum(1 for t in threading.enumerate() if isinstance(t, paramiko.Transport) and t.is_alive())
    sockets = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        # the listing's own fd, gone already
        except FileNotFoundError:
            pass
    return threads, sockets


def test_target_behind_a_proxyjump_alias_is_reached_when_both_keys_are_known(jump):
    jump["known"].write_text(jump["a"].host_key_line() + jump["b"].host_key_line())
    with connect(jump["target"]) as r:
        facts = r.run_py("facts", {"sglang_root": r.host.sglang_root})
        # gpu-b's release: the alias reached the target
        assert facts["sglang"]["version"] == "0.5.15"
        # ...through gpu-a
        assert len(r._jumps) == 1 and r._jumps[0].port == jump["a"].client_port


def test_unknown_jump_host_key_is_refused_with_one_line_and_nothing_left_open(jump):
    # the target is known, the jump host is not
    jump["known"].write_text(jump["b"].host_key_line())
    before = transports_and_sockets()
    with pytest.raises(HostKeyError) as err:
        connect(jump["target"]).run(["true"])
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("sbx-target (jump host sbx-jump): unknown host key for [127.0.0.1]:")
    assert f":{jump['a'].client_port} " in msg and "SHA256:" in msg and "--accept-new-host-key" in msg
    assert jump["known"].read_text() == jump["b"].host_key_line(), "refusing must not save anything"
    assert transports_and_sockets() == before


def test_accept_new_host_key_saves_every_hop_and_then_both_are_known(jump):
    with connect(jump["target"], accept_new_host_key=True) as r:
        assert r.run(["echo", "ok"]).stdout == "ok\n"
    saved = jump["known"].read_text()
    for h in (jump["a"], jump["b"]):
        assert f"[127.0.0.1]:{h.client_port} ssh-ed25519 {h.host_key_line().split()[2]}" in saved
    # no flag needed any more
    with connect(jump["target"]) as r:
        assert r.run(["echo", "ok"]).stdout == "ok\n"


def test_changed_jump_host_key_is_always_refused(jump):
    a, b = jump["a"], jump["b"]
    # gpu-b's key under gpu-a's address: what a jump host whose key changed looks like.
    jump["known"].write_text(
        b.host_key_line().replace(f"]:{b.client_port} ", f"]:{a.client_port} ") + b.host_key_line()
    )
    before = transports_and_sockets()
    for accept in (False, True):
        with pytest.raises(HostKeyError, match=r"^sbx-target \(jump host sbx-jump\): host key for .*CHANGED"):
            connect(jump["target"], accept_new_host_key=accept).run(["true"])
    assert transports_and_sockets() == before


def test_inventory_gateway_refusal_closes_the_gateway(use_sandbox, tmp_path):
    # The gateway (gpu-a) is known; the host behind it has a known_hosts of its own that lacks its key.
    b = use_sandbox.host("gpu-b")
    use_sandbox.write_inventory(
        extra=[
            {
                "name": "behind-a",
                "address": "127.0.0.1",
                "port": b.client_port,
                "gateway": "gpu-a",
                "known_hosts": str(tmp_path / "empty_known_hosts"),
            }
        ]
    )
    try:
        inv = load_inventory(use_sandbox.inventory)
        before = transports_and_sockets()
        with pytest.raises(HostKeyError, match=r"^behind-a: unknown host key"):
            connect(inv.get("behind-a"), inventory=inv).run(["true"])
        assert transports_and_sockets() == before, "the opened gateway must be closed again"
        with connect(inv.get("behind-a"), inventory=inv, accept_new_host_key=True) as r:
            assert r.run(["echo", "ok"]).stdout == "ok\n"
        assert transports_and_sockets() == before, "closing a Remote closes its gateway too"
    finally:
        use_sandbox.write_inventory()


def test_inventory_gateway_loop_is_one_line(use_sandbox):
    inv = load_inventory(use_sandbox.inventory)
    inv.hosts["loop-a"] = dataclasses.replace(inv.get("gpu-a"), name="loop-a", gateway="loop-b")
    inv.hosts["loop-b"] = dataclasses.replace(inv.get("gpu-b"), name="loop-b", gateway="loop-a")
    with pytest.raises(ConnectError, match="gateway loop: loop-a -> loop-b -> loop-a"):
        connect(inv.get("loop-a"), inventory=inv).run(["true"])


def test_cli_refuses_an_unknown_jump_host_then_accepts_and_records_it(jump, use_sandbox):
    # ad-hoc hosts use it instead of ~/.ssh/known_hosts
    env = {"SGLOPS_KNOWN_HOSTS": str(jump["known"])}
    refused = inv_cmd("facts", "--host", "sbx-target", env=env)
    # the exit class is issue 13 item 6
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    lines = [ln for ln in refused.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "jump host sbx-jump" in lines[0] and "unknown host key" in lines[0], (
        refused.stderr
    )
    assert not jump["known"].exists()
    accepted = inv_cmd("facts", "--host", "sbx-target", "--accept-new-host-key", env=env)
    assert accepted.returncode == 0, accepted.stderr
    assert jump["known"].read_text().count("ssh-ed25519") == 2


def test_closing_a_remote_ends_every_hops_reader_thread_at_once(jump):
    # paramiko's own close() closes the socket under its running reader thread, which then reads
    # whatever socket gets that file descriptor next: sglops ends the threads before the sockets go.
    jump["known"].write_text(jump["a"].host_key_line() + jump["b"].host_key_line())
    r = connect(jump["target"])
    r.run(["true"])
    transports = [c.client.get_transport() for c in (*r._jumps, r._conn)]
    assert all(t.is_alive() for t in transports)
    r.close()
    assert not any(t.is_alive() for t in transports)
    assert all(
        t.sock.closed if isinstance(t.sock, paramiko.Channel) else t.sock.fileno() == -1 for t in transports
    )


@pytest.fixture
def jump_by_address(use_sandbox, tmp_path, monkeypatch):
    """The red team's F4: `ProxyJump user@127.0.0.1:A` for a target whose own address is 127.0.0.1 (port B).
    Fabric took the hop for the target itself and dropped it: the target was reached directly, and the jump
    host's key never checked."""
    a, b = use_sandbox.host("gpu-a"), use_sandbox.host("gpu-b")
    user = getpass.getuser()
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host sbx-target\n    HostName 127.0.0.1\n    Port {b.client_port}\n    User {user}\n"
        f"    IdentityFile {use_sandbox.client_key}\n    ProxyJump {user}@127.0.0.1:{a.client_port}\n\n"
        f"Host 127.0.0.1\n    IdentityFile {use_sandbox.client_key}\n"
    )
    monkeypatch.setenv("SGLOPS_SSH_CONFIG", str(config))
    known = tmp_path / "known_hosts"
    target = Host(
        name="sbx-target",
        address="sbx-target",
        known_hosts=str(known),
        python=HOST_PYTHON,
        sglang_root=str(b.sglang_root),
        connect_timeout=5,
    )
    return {"a": a, "b": b, "known": known, "target": target}


def test_a_proxyjump_hop_at_the_targets_own_address_is_used(jump_by_address):
    j = jump_by_address
    j["known"].write_text(j["a"].host_key_line() + j["b"].host_key_line())
    with connect(j["target"]) as r:
        assert r.run_py("facts", {"sglang_root": r.host.sglang_root})["sglang"]["version"] == "0.5.15"
        assert [c.port for c in r._jumps] == [j["a"].client_port], "the hop was dropped: reached directly"


def test_a_proxyjump_hop_at_the_targets_own_address_has_its_key_checked(jump_by_address):
    j = jump_by_address
    # the target is known, the jump host is not
    j["known"].write_text(j["b"].host_key_line())
    with pytest.raises(HostKeyError, match=r"^sbx-target \(jump host 127\.0\.0\.1\): unknown host key"):
        connect(j["target"]).run(["true"])


def test_a_proxyjump_loop_is_one_line(use_sandbox, tmp_path, monkeypatch):
    a, b = use_sandbox.host("gpu-a"), use_sandbox.host("gpu-b")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host ja\n    HostName 127.0.0.1\n    Port {a.client_port}\n    ProxyJump jb\n\n"
        f"Host jb\n    HostName 127.0.0.1\n    Port {b.client_port}\n    ProxyJump ja\n"
    )
    monkeypatch.setenv("SGLOPS_SSH_CONFIG", str(config))
    with pytest.raises(ConfigError, match=r"^ProxyJump loop: 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+ -> 127"):
        connect(Host(name="ja", address="ja", connect_timeout=3)).run(["true"])
