"""A task's SSH connection opens in a thread of its own as soon as the host is known (issue 44: the handshake
beside the task's imports): its first command uses it, a failure is the same one line at the first command,
and a connection never used is closed with the task."""

from __future__ import annotations

import dataclasses
import socket
import threading

import pytest

from sglops.core.errors import ConnectError
from sglops.core.hosts import load_inventory
from sglops.core.remote import connect


def _alive(name_part: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if name_part in t.name and t.is_alive()]


def test_the_first_command_uses_the_early_connection(use_sandbox):
    host = load_inventory(use_sandbox.inventory).get("gpu-a")
    with connect(host) as remote:
        remote.open_early()
        assert remote.run(["echo", "hi"]).stdout == "hi\n"
        assert remote.round_trips == 1 and not _alive("ssh-open")


def test_a_failed_early_connection_is_the_same_line_at_the_first_command(use_sandbox):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = dataclasses.replace(
        load_inventory(use_sandbox.inventory).get("gpu-a"), port=port, connect_timeout=5
    )
    errors = []
    for early in (False, True):
        with connect(host) as remote:
            if early:
                remote.open_early()
            with pytest.raises(ConnectError) as caught:
                remote.run(["true"])
            errors.append(str(caught.value))
    assert errors[0] == errors[1] and "gpu-a" in errors[0]


def test_an_unused_early_connection_is_closed(use_sandbox):
    host = load_inventory(use_sandbox.inventory).get("gpu-a")
    before = len(threading.enumerate())
    with connect(host) as remote:
        remote.open_early()
    assert not _alive("ssh-open") and len(threading.enumerate()) <= before
