"""Naming a failed start from what a REAL SGLang 0.5.23
server printed (tests/data/server_logs/, kept verbatim).

Each file is named CLASS--what-was-done.log; the classifier must name it from the whole log since the restart
marker, with the one line that shows the cause. The same classes are met end to end in test_real_server.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglops.host import server_restart

LOGS = Path(__file__).parent / "data" / "server_logs"
REAL_LOGS = sorted(LOGS.glob("*.log"))


@pytest.fixture(scope="module")
def host_side() -> dict:
    """The host-side helpers (server_restart and what it
    imports from server_common), as they run on a host."""
    return vars(server_restart)


def test_every_class_has_a_real_log():
    named = {p.name.split("--")[0] for p in REAL_LOGS}
    assert {
        "unknown_backend",
        "model_missing",
        "bad_argument",
        "unsupported",
        "import_error",
        "port_in_use",
    } <= named
    # multi-rank and multi-node
    assert {"thread_binding", "nccl_on_cpu", "dist_init_timeout", "peer_lost"} <= named


@pytest.mark.parametrize("log", REAL_LOGS, ids=lambda p: p.stem)
def test_a_real_start_up_failure_is_named_with_its_cause(host_side, log):
    lines = log.read_text(errors="replace").splitlines()
    cls, label, evidence = host_side["classify"](lines)
    # a start that came up: nothing to name, nothing fatal
    if log.name.startswith("healthy--"):
        assert (cls, evidence) == (None, None) and not host_side["FATAL"].search(log.read_text())
        return
    assert cls == log.name.split("--")[0], (cls, evidence)
    assert label and evidence
    flat = re.sub(r"\s+", " ", log.read_text(errors="replace"))
    # a line the server printed, not one we made up
    assert evidence.removesuffix("...") in flat


def test_the_cause_is_the_line_a_person_would_quote(host_side):
    def cause(prefix: str) -> str:
        path = next(p for p in REAL_LOGS if p.name.startswith(prefix))
        return host_side["classify"](path.read_text(errors="replace").splitlines())[2]

    assert cause("model_missing").startswith("OSError: Repo id must be in the form")
    assert "argument --attention-backend: invalid choice: 'bogus_attn'" in cause("unknown_backend")
    assert "argument --kv-cache-dtype: invalid choice: 'fp9_e9m9'" in cause("bad_argument")
    # the exception, not a stack frame
    assert cause("unsupported--flashinfer").startswith("NameError:")
    assert cause("unsupported--fp8") == "ValueError: CPU FP8 KV cache requires Intel AMX support."
    assert cause("import_error") == "ModuleNotFoundError: No module named 'vllm'"
    assert "[Errno 98] error while attempting to bind on address" in cause("port_in_use")
    assert cause("thread_binding").startswith("AssertionError: SGLANG_CPU_OMP_THREADS_BIND is not set")
    assert cause("nccl_on_cpu") == "ValueError: Expected a cuda device, but got: cpu"
    assert cause("dist_init_timeout") == (
        "torch.distributed.DistStoreError: Timed out after 41 seconds waiting for "
        "clients. 1/2 clients joined."
    )
    assert "gloo/transport/tcp/pair.cc" in cause("peer_lost") and "Connection closed by peer" in cause(
        "peer_lost"
    )


def test_the_last_30_lines_are_not_enough(host_side):
    """The usage text argparse prints pushes the cause out
    of any short tail: only the whole start names it."""
    path = next(p for p in REAL_LOGS if p.name.startswith("unsupported--flashinfer"))
    lines = path.read_text(errors="replace").splitlines()
    assert host_side["classify"](lines)[0] == "unsupported"
    assert host_side["classify"](lines[-3:])[0] != "unsupported"


def test_classification_starts_at_this_starts_marker(host_side, tmp_path):
    """An old crash earlier in the same log is not this start's cause."""
    old = next(p for p in REAL_LOGS if p.name.startswith("model_missing")).read_bytes()
    log = tmp_path / "server.log"
    log.write_bytes(old + b"\n===== sglops restart 2026-12-02T17:00:00 =====\n")
    offset = len(old) + 1
    with open(log, "ab") as fh:
        fh.write(b"[2026-12-02 17:00:30] The server is fired up and ready to roll!\n")
    since = host_side["read_since"](str(log), offset)
    assert since[0].startswith("===== sglops restart") and host_side["classify"](since)[0] is None


def test_a_server_that_says_it_failed_but_hangs_is_recognised(host_side):
    """0.5.23 on CPU: the scheduler raises, the launcher logs sigquit/kill_process_tree and never exits."""
    path = next(p for p in REAL_LOGS if p.name.startswith("unsupported--flashinfer"))
    assert host_side["FATAL"].search(path.read_text(errors="replace"))
    port = next(p for p in REAL_LOGS if p.name.startswith("port_in_use"))
    assert host_side["FATAL"].search(
        port.read_text(errors="replace").split("Waiting for application shutdown")[0]
    )
    healthy = "[2026-12-02 17:00:30] The server is fired up and ready to roll!\n"
    assert not host_side["FATAL"].search(healthy)


def test_a_health_answer_cut_short_reads_as_no_answer_not_as_a_crash_of_the_wait(host_side):
    """A server dying while it answers /health (seen under load: the restart step failed with http.client's
    IncompleteRead, which is not an OSError) is "not up yet" to the health wait, which goes on until the
    process dies or the timeout passes."""
    import socket
    import subprocess
    import sys
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]

    def answer_half():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.recv(4096)
            # then dies: no body
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n")
            conn.close()

    threading.Thread(target=answer_half, daemon=True).start()
    try:
        status, err = host_side["http_get"](f"http://127.0.0.1:{port}/health", timeout=2)
        assert status is None and "IncompleteRead" in err
        alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            res = host_side["wait_healthy"](alive, "127.0.0.1", port, 0.5, "/nonexistent.log")
        finally:
            alive.kill()
            alive.wait()
        assert res["state"] == "timeout"
    finally:
        srv.close()
