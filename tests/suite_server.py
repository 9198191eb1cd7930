"""One real SGLang CPU server for the tests that only read from it (bench, profile), per test run (per xdist worker).

Why: each start costs 20-60 s of CPU (three processes import torch, transformers and sglang) and ~2.4 GB; the
bench and profile proofs send requests and read what comes back, so one server serves them all. A test may kill it
on purpose (test_bench_real's server-dies test): `get()` checks /health and starts a new one, with a log of its
own, so the next reader never sees a dead server.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from sglops.sandbox.sglang_cpu import CpuServer, start_server
from sglops.sandbox.sshd import free_port


def healthy(server: CpuServer, timeout: float = 5.0) -> bool:
    """The launcher alive and /health answering 200 (a dead scheduler leaves the launcher up, /health failing)."""
    if server.proc.poll() is not None:
        return False
    try:
        with urllib.request.urlopen(f"{server.url}/health", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


class SharedServer:
    """Started on first use; started again (after stopping what is left) when it is no longer healthy."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.server: CpuServer | None = None
        self.starts = 0

    def get(self) -> CpuServer:
        if self.server is not None and healthy(self.server):
            return self.server
        self.stop()
        self.starts += 1
        # busy-polling (no --sleep-on-idle): test_bench_real asserts on stream timing (sglang_cpu.IDLE_FLAGS)
        self.server = start_server(free_port(), self.folder / f"server-{self.starts}.log", timeout=600,
                                   sleep_on_idle=False)
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
