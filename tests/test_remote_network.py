"""Whole answers over SSH, on loopback and through a
hostile network (50 ms +- 10 ms each way, data in pieces).

sshd may send a command's exit status before the end of its stdout; sglops must read both streams to
EOF and never print more than one line of a host's answer in an error (the whole answer goes to a log
file under artifacts/). The far host sits behind sglops/sandbox/netproxy.py.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sglops.core import host_bundle
from sglops.core.errors import ConnectError, RemoteError
from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.patch import apply as patches
from sglops.sandbox.netproxy import NetProfile, NetProxy
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_remote_loop import big_answer_argv  # noqa: E402

MB = 1 << 20
HOSTILE = {"delay_ms": 50, "jitter_ms": 10, "max_chunk": 1448, "rate_mbit": 100, "seed": 12}


@pytest.fixture(scope="module")
def far_sandbox(make_sandbox):
    # sshd re-keys every 4 MB too: key exchanges happen mid-answer, as on a long-lived connection.
    return make_sandbox(
        [{"name": "far", "sglang": "0.5.23", "network": HOSTILE, "rekey_limit": "4M"}], name="far"
    )


@pytest.fixture
def far(far_sandbox, monkeypatch, tmp_path):
    """An open SSH Remote to the host behind the hostile network."""
    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path / "artifacts"))
    inv = load_inventory(far_sandbox.inventory)
    with connect(inv.get("far"), inventory=inv) as r:
        yield r


def test_output_sent_after_the_exit_status_is_still_read(remote_a):
    # The shell exits at once (sshd sends exit-status then), a child it left behind writes 1 MB later.
    script = f"(sleep 0.3; head -c {MB} /dev/zero | tr '\\0' x; echo END) & exit 0"
    out = remote_a.run(["sh", "-c", script]).stdout
    assert len(out) == MB + 4 and out.endswith("END\n")


def test_a_megabyte_answer_from_a_script_that_exits_at_once_comes_back_whole(remote_a):
    for _ in range(20):
        out = remote_a.run(big_answer_argv(MB)).stdout
        assert len(out) == MB + 3 and out.endswith("END")


def test_fifty_megabyte_answers_through_the_hostile_network_are_whole(far, far_sandbox):
    before = far_sandbox.host("far").proxy.stats.bytes_down
    for _ in range(50):
        out = far.run(big_answer_argv(MB)).stdout
        assert len(out) == MB + 3 and out.endswith("END")
    # it really went through the proxy
    assert far_sandbox.host("far").proxy.stats.bytes_down - before > 50 * MB


def test_key_re_exchanges_mid_answer_never_stall_the_connection(far_sandbox, monkeypatch, tmp_path):
    # paramiko would start its own re-exchange every 1 MB here (before sshd's 4 MB); one it starts deadlocks
    # when the host closes a channel meanwhile (paramiko #822: "Key-exchange timed out" after 30 s).
    import paramiko.packet

    monkeypatch.setattr(paramiko.packet.Packetizer, "REKEY_BYTES", MB)
    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path / "artifacts"))
    inv = load_inventory(far_sandbox.inventory)
    start = time.monotonic()
    with connect(inv.get("far"), inventory=inv) as r:
        for _ in range(16):
            assert len(r.run(big_answer_argv(MB), timeout=60).stdout) == MB + 3
    assert time.monotonic() - start < 60


def test_remote_layer_through_the_hostile_network(far, tmp_path):
    hostile = "$(id) `id` ; 'q' \"dq\" \\ end"
    assert far.run(["printf", "%s", hostile]).stdout == hostile
    facts = far.run_py("facts", {"sglang_root": far.host.sglang_root})
    assert facts["sglang"]["version"] == "0.5.23"
    src = tmp_path / "blob"
    src.write_bytes(os.urandom(2 * MB))
    dest = str(tmp_path / "on-the-host" / "blob")
    far.run(["mkdir", "-p", os.path.dirname(dest)])
    far.put(src, dest)
    far.get(dest, tmp_path / "back")
    assert (tmp_path / "back").read_bytes() == src.read_bytes()
    with pytest.raises(RemoteError, match=r"exited 3: boom$"):
        far.run(["sh", "-c", "echo boom >&2; exit 3"])


def test_a_connection_cut_mid_answer_is_an_error_not_a_short_answer(far, far_sandbox):
    proxy = far_sandbox.host("far").proxy
    far.run(["true"])
    cutter = threading.Timer(0.4, proxy.cut_all)
    cutter.start()
    try:
        with pytest.raises(ConnectError, match="far: connection lost"):
            far.run(["sh", "-c", f"sleep 0.2; head -c {8 * MB} /dev/zero"])
    finally:
        cutter.cancel()


def test_an_unparseable_answer_is_one_line_and_kept_whole_in_a_log(remote_a, tmp_path):
    # A "python" that echoes its stdin: the host answers with the whole request, the facts script's bundle.
    echo = tmp_path / "echo-python"
    echo.write_text("#!/bin/sh\ncat\n")
    echo.chmod(0o755)
    remote_a.python = str(echo)
    with pytest.raises(RemoteError) as err:
        remote_a.run_py("facts", {})
    msg = str(err.value)
    # 400 characters of host text at most, then the log path
    assert "\n" not in msg and len(msg) < 1000, msg
    assert msg.startswith("gpu-a: remote step facts gave no answer (exit 0): ")
    log = Path(msg.rsplit("(whole answer in ", 1)[1].rstrip(")"))
    assert log.is_file() and log.is_relative_to(Path(os.environ["SGLOPS_ARTIFACTS"]))
    kept = log.read_text()
    sent = host_bundle.payload("facts", {}).decode()
    # the whole answer, not one line of it
    assert sent in kept and len(sent) > 10_000


def test_a_failed_command_shows_its_last_line_and_logs_the_rest(remote_a):
    with pytest.raises(RemoteError) as err:
        remote_a.run(["sh", "-c", "seq 1 5000 >&2; exit 3"])
    msg = str(err.value)
    assert "\n" not in msg and "exited 3: 5000 (whole output in " in msg
    log = Path(msg.rsplit("(whole output in ", 1)[1].rstrip(")"))
    assert log.read_text().count("\n") > 5000


def test_apply_and_revert_through_the_hostile_network_leave_no_half_state(
    far, far_sandbox, monkeypatch, tmp_path
):
    root = far_sandbox.host("far").sglang_root
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=root, check=True)
    shutil.rmtree(root / ".sglops", ignore_errors=True)
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    monkeypatch.setenv("SGLOPS_PATCHES", str(tmp_path / "patches"))

    def tree() -> str:
        return subprocess.run(
            ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()

    start = time.monotonic()
    assert patches.apply_patch(far, "gather-cast").action == "applied"
    assert tree().endswith("flashinfer_mla_backend.py") and [e["patch"] for e in patches.applied(far)] == [
        "gather-cast"
    ]
    assert patches.revert_patch(far, "gather-cast").action == "reverted"
    assert tree() == "" and patches.applied(far) == []
    # each round trip paid the delay: it went through the proxy
    assert time.monotonic() - start > 0.5


def test_the_proxy_only_listens_on_loopback(far_sandbox):
    proxy = far_sandbox.host("far").proxy
    assert proxy._server.sockets[0].getsockname()[0] == "127.0.0.1"


def _through(proxy_profile, sandbox, tmp_path):
    """gpu-a of the default sandbox, reached through a proxy of its own (known_hosts for the proxy's port)."""
    a = sandbox.host("gpu-a")
    proxy = NetProxy(a.port, proxy_profile).start()
    known = tmp_path / "known_hosts"
    known.write_text(a.host_key_line().replace(f"]:{a.port} ", f"]:{proxy.port} "))
    inv = load_inventory(sandbox.inventory)
    return proxy, dataclasses.replace(
        inv.get("gpu-a"), port=proxy.port, known_hosts=str(known), connect_timeout=3
    )


def test_lost_segments_only_slow_an_answer_down(use_sandbox, tmp_path):
    proxy, host = _through(
        NetProfile(delay_ms=5, jitter_ms=2, loss=0.05, rto_ms=50, seed=3), use_sandbox, tmp_path
    )
    try:
        with connect(host) as r:
            assert len(r.run(big_answer_argv(MB)).stdout) == MB + 3
        assert proxy.stats.lost_pieces > 0
    finally:
        proxy.stop()


def test_a_connection_dropped_during_the_handshake_is_one_line(use_sandbox, tmp_path):
    proxy, host = _through(
        NetProfile(delay_ms=1, jitter_ms=0, drop=1.0, drop_within=3000, seed=4), use_sandbox, tmp_path
    )
    try:
        with pytest.raises(ConnectError) as err:
            connect(host).run(["true"])
        assert str(err.value).startswith("gpu-a: ") and "\n" not in str(err.value)
        assert proxy.stats.dropped == 1
    finally:
        proxy.stop()
