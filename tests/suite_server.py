"""One real SGLang CPU server for the tests that only read from it (bench, loads, profile), per test run (per
xdist worker).

Why: each start costs 20-60 s of CPU (three processes import torch, transformers and sglang) and ~2.4 GB; the
bench and profile proofs send requests and read what comes back, so one server serves them all. A test may
kill it on purpose (test_bench_real's server-dies test): `get()` checks /health and starts a new one, with a
log of its own, so the next reader never sees a dead server.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from sglops.sandbox.sglang_cpu import CpuServer, start_server
from sglops.sandbox.sshd import free_port

# --enable-metrics: test_bench_loads_real scrapes /metrics during a level, so it reads this server too instead
# of starting one of its own (a start is 40-100 s of CPU). The readers' other proofs do not depend on it; a
# server compared with this one for its config (test_bench_real's bf16 KV server) is started with the same
# flags.
# --chat-template: the tiny model's tokenizer has none (SGLang's chat endpoint then answers 400);
# test_bench_workloads_real sends sessions over /v1/chat/completions. The template puts the messages' contents
# back to back; /generate and /v1/completions do not read it.
CHAT_TEMPLATE = Path(__file__).parent / "data" / "chat_concat.jinja"
SHARED_FLAGS = ("--enable-metrics", "--chat-template", str(CHAT_TEMPLATE))


def healthy(server: CpuServer, timeout: float = 5.0) -> bool:
    """The launcher alive and /health answering 200 (a dead
    scheduler leaves the launcher up, /health failing)."""
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
        # --sleep-on-idle (start_server's default): SGLang's scheduler sleeps only while it has no request at
        # all, so a stream is timed as without it; busy-polling, the idle server took a core's share from the
        # other workers for the whole of its modules (~300 s on CI). The timing proofs allow a starved host's
        # bursts.
        self.server = start_server(
            free_port(), self.folder / f"server-{self.starts}.log", extra=SHARED_FLAGS, timeout=600
        )
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
