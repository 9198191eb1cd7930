"""Every read of a server has a deadline and a size bound, and whatever a server answers is handled or refused
in one line without losing what was measured: the host scripts against tests/hostile_server.py (loopback).

Each check runs the read on a thread and waits a bounded time for it: a read without a deadline would hang
there (for as long as the hostile server keeps sending), and the test fails instead of hanging.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import orjson
import pytest
from hostile_server import HostileServer
from inproc import run_inv

from sglops.core import artifacts
from sglops.host import (
    _bench_metrics,
    _bench_request,
    _bench_server,
    _fetch,
    _server_proc,
    server_common,
    server_restart,
)


def _within(seconds: float, fn, *args, **kw):
    """(fn's value or exception, seconds it took); fails when fn is still running after `seconds`."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn(*args, **kw)
        except BaseException as exc:  # noqa: BLE001 (handed back to the test)
            out["value"] = exc

    t0 = time.perf_counter()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__} still reading after {seconds} s"
    return out["value"], time.perf_counter() - t0


@pytest.mark.parametrize("behaviour", ["endless-tokens", "keep-alive-forever", "byte-trickle"])
def test_a_stream_that_never_finishes_ends_at_the_requests_deadline(behaviour):
    with HostileServer(behaviour) as srv:
        rec, took = _within(20, _bench_request.one_request, srv.port, "sglang", "tiny", [1, 2, 3], 2, 0.5)
    assert isinstance(rec, dict), rec
    assert rec["outcome"] == "timeout" and "deadline" in rec["error"], rec["error"]
    assert took < 0.5 + 2 / _bench_request.FLOOR_TOK_S + 2


def test_the_deadline_is_overridable_per_run():
    with HostileServer("endless-tokens") as srv:
        rec, took = _within(
            20, _bench_request.one_request, srv.port, "sglang", "tiny", [1], 4096, 30.0, limit_s=1.5
        )
    assert rec["outcome"] == "timeout" and "--request-deadline" in rec["error"] and took < 4


@pytest.mark.parametrize(
    "behaviour,path",
    [("health-trickle", "/health"), ("info-trickle", "/server_info"), ("metrics-endless", "/metrics")],
)
def test_health_server_info_and_metrics_reads_are_bounded(behaviour, path):
    with HostileServer(behaviour) as srv:
        got, took = _within(15, _bench_server.get, srv.port, path, 1.0)
        scraped, took_scrape = _within(15, _bench_metrics.scrape, "127.0.0.1", srv.port, 1.0)
    assert isinstance(got, _fetch.Late | _fetch.TooLarge), got
    assert took < 3 and took_scrape < 3
    if behaviour == "metrics-endless":
        assert scraped[0] is None and "unreachable" in scraped[1]


def test_the_restart_health_wait_keeps_its_startup_timeout_as_a_deadline(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with HostileServer("health-trickle") as srv:
            got, took = _within(
                20,
                server_restart.wait_healthy,
                proc,
                "127.0.0.1",
                srv.port,
                2.0,
                str(tmp_path / "server.log"),
            )
    finally:
        proc.kill()
        proc.wait()
    assert got["state"] == "timeout" and took < 2.0 + 1.5, (got, took)


def test_a_30mb_server_info_is_kept_by_its_fields():
    with HostileServer("huge-info") as srv:
        info, _ = _within(20, _bench_server.server_info, srv.port)
        status_info, _ = _within(20, server_common.server_info, "127.0.0.1", srv.port)
    for doc in (info, status_info[0]):
        assert doc["tp_size"] == 1 and "chat_template" in doc["_dropped"]
        assert len(json.dumps(doc)) < 10_000


@pytest.mark.parametrize(
    "behaviour", ["deep-info", "list-info", "string-info", "wide-info", "number-model-path"]
)
def test_a_server_info_of_any_shape_is_a_mapping_or_nothing(behaviour):
    with HostileServer(behaviour) as srv:
        info, _ = _within(20, _bench_server.server_info, srv.port)
        status_info, _ = _within(20, server_common.server_info, "127.0.0.1", srv.port)
        model, _ = _within(20, _bench_server.served_model, srv.port, info)
    for doc in (info, status_info[0]):
        assert doc is None or isinstance(doc, dict), doc
        # no integer past 64 bits left in it
        orjson.dumps(doc)
    assert isinstance(model, str)


def test_token_counts_past_64_bits_end_the_request_in_its_record():
    with HostileServer("wide-counts") as srv:
        rec, _ = _within(20, _bench_request.one_request, srv.port, "sglang", "tiny", [1], 4, 2.0)
    assert rec["outcome"] == "error" and "impossible completion_tokens" in rec["error"]
    assert rec["prompt_tokens"] is None
    orjson.dumps(rec)


@pytest.mark.parametrize(
    "behaviour,outcome",
    [
        ("string-latency", "ok"),
        ("meta-not-a-map", "error"),
        ("garbage", "error"),
        ("bad-status", "error"),
        ("endless-error", "http_error"),
        ("deep-chunk", "error"),
        ("unauthorized", "http_error"),
    ],
)
def test_a_wrong_typed_or_malformed_answer_is_one_requests_outcome(behaviour, outcome):
    with HostileServer(behaviour) as srv:
        rec, _ = _within(20, _bench_request.one_request, srv.port, "sglang", "tiny", [1], 4, 2.0)
    assert isinstance(rec, dict), rec
    assert rec["outcome"] == outcome, rec
    assert rec["server_e2e_s"] is None and rec["cached_tokens"] is None
    orjson.dumps(rec)


def test_a_record_with_an_integer_past_64_bits_is_still_written(tmp_path):
    path = artifacts.write_json(tmp_path / "bench.json", {"vocab_size": 1 << 70, "tokens": [1, -(1 << 80)]})
    assert json.loads(path.read_text()) == {"tokens": [1, str(-(1 << 80))], "vocab_size": str(1 << 70)}


def test_requests_carry_the_servers_own_api_key(monkeypatch):
    key = "sk-bench-4f9a2c1e7d"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--port", "1", "--api-key", key]
    )
    try:
        time.sleep(0.2)
        assert _server_proc.server_api_key(proc.pid) == key
    finally:
        proc.kill()
        proc.wait()
    monkeypatch.setitem(_bench_server.AUTH, "Authorization", "Bearer " + key)
    with HostileServer("string-latency") as srv:
        _bench_request.one_request(srv.port, "sglang", "tiny", [1], 4, 2.0)
        _bench_server.get(srv.port, "/health")
    assert all(f"Authorization: Bearer {key}".encode() in head for _, head in srv.seen)


def test_a_line_that_comes_in_many_pieces_is_joined_in_linear_time():
    piece = b"x" * 4096
    # a 16 MiB line in 4 KiB reads
    blocks = [(0.0, piece)] * 4096 + [(0.0, b"\nend\n")]
    t0 = time.perf_counter()
    got = list(_fetch.lines(iter(blocks)))
    took = time.perf_counter() - t0
    assert [len(line) for _, line in got] == [16 << 20, 3]
    assert took < 0.5, took


@pytest.mark.parametrize(
    "behaviour", ["list-info", "string-info", "deep-info", "wide-info", "number-model-path"]
)
def test_server_status_reads_a_server_info_of_any_shape(behaviour, use_sandbox, capsys):
    with HostileServer(behaviour) as srv:
        code, out, err = run_inv(
            capsys, "server-status", "--host", "gpu-a", "--port", str(srv.port), "--json"
        )
    assert code == 0 and "Traceback" not in err, err[-2000:]
    doc = json.loads(out)
    assert doc["ok"] and (doc["server_info"] is None or isinstance(doc["server_info"], dict)), doc


def test_the_profile_requests_end_at_their_deadline_against_a_trickling_server():
    """The profile's POSTs (/start_profile, /generate, /stop_profile: host/_common.http) are bounded as a
    whole: a server that sends a byte every 0.3 s forever, or never finishes its headers, ends there with one
    line."""
    from sglops.host._common import http

    for behaviour, path in (("byte-trickle", "/generate"), ("health-trickle", "/health")):
        with HostileServer(behaviour) as srv:
            t0 = time.monotonic()
            status, text = http(
                f"http://127.0.0.1:{srv.port}{path}",
                {"text": "x"} if path == "/generate" else None,
                timeout=1.5,
            )
            took = time.monotonic() - t0
        assert status is None and "no complete answer" in text and "within 1.5 s" in text, (behaviour, text)
        assert took < 3.0, (behaviour, took)
