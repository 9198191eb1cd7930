"""What a hostile or unusual SSH side gives: known_hosts markers and damage (red team F3, F7), a connection
cut inside the SSH banner (F12). Each ends in one line (or connects, where OpenSSH would), never a traceback.

Real sshd on loopback (gpu-a of the default sandbox); the known_hosts files are written per test.
"""

from __future__ import annotations

import base64
import dataclasses
import os

import pytest

from sglops.core.errors import ConfigError, HostKeyError
from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.sandbox.netproxy import NetProfile, NetProxy
from tests.conftest import inv_cmd

# An ed25519 key of nobody in particular (32 bytes of 0x11): a CA or a revoked key of another host.
OTHER_KEY = (
    "ssh-ed25519 " + base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + b"\x11" * 32).decode()
)


@pytest.fixture
def gpu_a(use_sandbox, tmp_path):
    """(gpu-a's inventory Host with its own known_hosts file, gpu-a's key line, that file)."""
    a = use_sandbox.host("gpu-a")
    known = tmp_path / "known_hosts"
    host = dataclasses.replace(
        load_inventory(use_sandbox.inventory).get("gpu-a"), known_hosts=str(known), connect_timeout=5
    )
    return host, a.host_key_line(), known


def _revoked(line: str) -> str:
    return "@revoked " + line


def test_a_cert_authority_line_is_skipped_and_the_host_still_connects(gpu_a):
    host, line, known = gpu_a
    known.write_text(f"@cert-authority *.example.com {OTHER_KEY}\n" + line)
    with connect(host) as r:
        assert r.run(["echo", "ok"]).stdout == "ok\n"


def test_a_revoked_line_for_another_host_leaves_this_one_alone(gpu_a):
    host, line, known = gpu_a
    known.write_text(f"@revoked other.example.com {OTHER_KEY}\n" + line + "garbage line that is no key\n")
    with connect(host) as r:
        assert r.run(["true"]).exit_code == 0


def test_a_revoked_key_is_refused_even_where_another_line_trusts_it(gpu_a):
    host, line, known = gpu_a
    known.write_text(line + _revoked(line))
    with pytest.raises(
        HostKeyError,
        match=r"^gpu-a: host key for .* is REVOKED .*known_hosts:2, @revoked\); "
        r"refusing to connect$",
    ):
        connect(host).run(["true"])


def test_a_revoked_key_is_never_saved_by_accept_new(gpu_a):
    host, line, known = gpu_a
    # a wildcard pattern matches it too
    known.write_text(_revoked(line.replace("[127.0.0.1]", "*")))
    before = known.read_text()
    with pytest.raises(HostKeyError, match="REVOKED"):
        connect(host, accept_new_host_key=True).run(["true"])
    assert known.read_text() == before


def test_known_hosts_that_is_a_folder_or_not_utf8_is_one_line(gpu_a):
    host, line, known = gpu_a
    known.mkdir()
    with pytest.raises(ConfigError, match=r"known_hosts .* is a folder"):
        connect(host).run(["true"])
    os.rmdir(known)
    known.write_bytes(line.encode() + b"# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"known_hosts:2: known_hosts is not UTF-8"):
        connect(host).run(["true"])


def test_the_cli_gives_one_line_for_a_revoked_key(use_sandbox, tmp_path, capsys, monkeypatch):
    from inproc import run_inv

    a = use_sandbox.host("gpu-a")
    known = tmp_path / "kh"
    known.write_text(_revoked(a.host_key_line()))
    monkeypatch.setenv("SGLOPS_KNOWN_HOSTS", str(known))
    code, out, err = run_inv(capsys, "facts", "--host", f"127.0.0.1:{a.client_port}")
    assert code == 3 and len(err.strip().splitlines()) == 1 and "REVOKED" in err, err


@pytest.mark.parametrize("within", [5, 30, 60, 200, 1500])
def test_a_connection_cut_inside_the_ssh_banner_is_one_line_and_nothing_else(use_sandbox, tmp_path, within):
    """F12: paramiko's transport thread printed its own traceback (its logger's last-resort handler writes to
    stderr when nothing configured logging). Run as a separate `inv`: in pytest, pytest's own log handler
    would swallow what a user's terminal shows."""
    a = use_sandbox.host("gpu-a")
    proxy = NetProxy(
        a.port, NetProfile(delay_ms=1, jitter_ms=0, drop=1.0, drop_within=within, seed=within)
    ).start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(a.host_key_line().replace(f"]:{a.port} ", f"]:{proxy.port} "))
        res = inv_cmd("facts", "--host", f"127.0.0.1:{proxy.port}", env={"SGLOPS_KNOWN_HOSTS": str(known)})
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 3 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        # the proxy cut it (each direction may count its cut)
        assert proxy.stats.dropped >= 1
    finally:
        proxy.stop()


def test_a_hashed_line_among_many_hosts_lines_is_found_and_the_file_is_read_again_once_changed(gpu_a):
    """Each connection adds only the lines naming its host (plain or hashed): a file of many hosts is parsed
    once per process and never added whole; a changed file (the host's key line gone) is read afresh."""
    from paramiko.hostkeys import HostKeys

    host, line, known = gpu_a
    name, key = line.split(" ", 1)
    others = "".join(f"[127.0.0.1]:{port} {OTHER_KEY}\n" for port in range(20000, 20200))
    known.write_text(others + f"{HostKeys.hash_host(name)} {key}")
    with connect(host) as r:
        assert r.run(["true"]).exit_code == 0
        # this host's line, not all 201
        assert len(r._connection().client.get_host_keys().keys()) == 1
    known.write_text(others)
    with pytest.raises(HostKeyError, match="unknown host key"):
        connect(host).run(["true"])
