"""The hostile-network proxy itself: connections it cuts, or that die under it, leave nothing behind.

A task it left pending or failed was logged later by the garbage collector, possibly in the middle of an
ast.parse (the finalizer formats a traceback, which on Python 3.11 parses with ast too): a CI run lost a patch
test to "AST constructor recursion depth mismatch".
"""

from __future__ import annotations

import gc
import logging
import socket
import socketserver
import struct
import threading
import time

from sglops.sandbox.netproxy import NetProfile, NetProxy


class _ResettingSink(socketserver.BaseRequestHandler):
    """Reads a little, then resets the connection (a server killed mid-stream)."""

    def handle(self) -> None:
        self.request.recv(4096)
        self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.request.close()


def _wait_accepted(proxy: NetProxy, count: int, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while proxy.stats.connections < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_cut_reset_and_stopped_connections_leave_no_task_for_the_garbage_collector(caplog):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _ResettingSink)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    caplog.set_level(logging.ERROR, logger="asyncio")
    try:
        for seed in range(6):
            profile = NetProfile(
                delay_ms=2, jitter_ms=1, rate_mbit=0, drop=1.0, drop_within=300_000, seed=seed
            )
            proxy = NetProxy(server.server_address[1], profile).start()
            clients = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(6)]
            for c in clients:
                c.setblocking(False)
            # keep writing while the server resets and the proxy drops
            for _ in range(40):
                for c in clients:
                    try:
                        c.send(b"x" * 16384)
                    except OSError:
                        pass
                time.sleep(0.002)
            # still open at stop
            clients.append(socket.create_connection(("127.0.0.1", proxy.port)))
            _wait_accepted(proxy, len(clients))
            proxy.stop()
            for c in clients:
                c.close()
        gc.collect()
    finally:
        server.shutdown()
        server.server_close()
    leaks = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert not leaks, leaks[:2]
