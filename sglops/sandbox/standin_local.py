"""Start the stand-in server directly on this machine (tests and benchmarks that need no SSH).

One place for what every caller needs: a clean SGLOPS_STANDIN_* environment plus the caller's knobs,
its own log, a wait for /health that notices an early exit, and a stop that takes the whole process
group. Loopback only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from sglops.core.errors import SglopsError
from sglops.sandbox.sshd import HOST_PYTHON, free_port

STANDIN = Path(__file__).with_name("standin_server.py")


class StandinProcess:
    """A running stand-in server on 127.0.0.1:port."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path | None) -> None:
        self.proc, self.port, self.log = proc, port, log

    def wait_healthy(self, timeout: float = 10) -> float:
        """Seconds until /health answered 200; raises with the log's tail if it exits or never does."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-800:] if self.log else ""
                raise SglopsError(f"stand-in exited {self.proc.returncode}: {tail}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as resp:
                    if resp.status == 200:
                        return time.monotonic() - start
            except OSError:
                pass
            time.sleep(0.02)
        raise SglopsError(f"stand-in on port {self.port} never became healthy within {timeout:g} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def start_standin(
    *args: str,
    port: int | None = None,
    knobs: dict | None = None,
    env: dict | None = None,
    sglang_python: Path | None = None,
    log: Path | None = None,
    script: Path = STANDIN,
) -> StandinProcess:
    """Start `script --port PORT ARGS`. SGLOPS_STANDIN_* knobs come only from `knobs` ({"TPS": 50} sets
    SGLOPS_STANDIN_TPS) and `env` (verbatim); sglang_python is the folder holding the served `sglang`
    package (put on PYTHONPATH)."""
    port = port or free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLOPS_STANDIN")}
    full["PYTHONPATH"] = str(sglang_python) if sglang_python else ""
    full.update({f"SGLOPS_STANDIN_{k.upper()}": str(v) for k, v in (knobs or {}).items()})
    full.update({k: str(v) for k, v in (env or {}).items()})
    out = open(log, "wb") if log else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            [HOST_PYTHON, str(script), "--port", str(port), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full,
            start_new_session=True,
        )
    finally:
        if log:
            out.close()
    return StandinProcess(proc, port, log)
