"""Crash classes of a REAL SGLang 0.5.23 start, end to end, on a sandbox host of their own (sglang_env: cpu).

The rest of the launch tier's crash cases (tests/test_real_server.py runs the others, between its stop and its
rollback) and a port taken by a socket that does not answer: a module of its own so that another xdist worker
takes these starts (each 20-60 s of CPU here). Same host, profile and assertions as there
(tests/real_server_host.py).
"""

from __future__ import annotations

import socket

import pytest
from real_server_host import (
    CRASHES,
    OTHER_CRASHES,
    PROFILE,
    WORKFLOW_CRASHES,
    real_host,
    server_processes,
    start_up_failure_is_named_and_leaves_nothing,
)

from sglops.launch import server as launch
from sglops.sandbox.sshd import free_port

pytestmark = pytest.mark.real_server


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(sandbox, remote): one sshd host whose SGLang is
    the real pip-installed 0.5.23, sglops pointed at it."""
    yield from real_host(tmp_path_factory, "real-crashes")


def test_the_two_modules_run_every_crash_case_once():
    assert sorted(WORKFLOW_CRASHES + OTHER_CRASHES) == sorted(CRASHES)


@pytest.mark.parametrize("case", OTHER_CRASHES)
def test_a_real_start_up_failure_is_named_and_leaves_nothing(real, case):
    sb, remote = real
    start_up_failure_is_named_and_leaves_nothing(remote, case)


def test_a_port_taken_by_a_socket_that_does_not_answer(real):
    """sglops' own check finds no listener; SGLang itself then fails to bind, and says so."""
    sb, remote = real
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        res = launch.restart(remote, PROFILE, port=port, timeout=600)
    assert not res.ok and res.failure == "port_in_use", (res.failure, res.failure_detail, res.log_tail)
    assert not server_processes(res.pid)
