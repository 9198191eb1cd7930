"""The socket listening on a port, found through sock_diag (listening sockets only) the same as through
/proc/net/tcp (every socket of the host, 10-20 ms and more on a busy host), IPv4 and IPv6."""

from __future__ import annotations

import socket

import pytest

from sglops.host import _server_proc


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_sock_diag_finds_what_proc_net_tcp_finds(family):
    with socket.socket(family) as listening, socket.socket(family) as bound:
        listening.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        # bound, not listening: not the server
        bound.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        found = _server_proc._diag_listen_inodes(port)
        assert found == _server_proc._proc_listen_inodes(port) and len(found) == 1
        assert _server_proc._diag_listen_inodes(bound.getsockname()[1]) == set()
        assert _server_proc.listening_pid(port) is not None


def test_no_sock_diag_reads_proc_net_tcp(monkeypatch):
    def refused(port):
        raise OSError("no sock_diag here")

    monkeypatch.setattr(_server_proc, "_diag_listen_inodes", refused)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert len(_server_proc._listen_inodes(listening.getsockname()[1])) == 1
