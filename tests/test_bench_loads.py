"""`inv bench` loads beyond closed-loop random ids, against the stand-in server on a sandbox host (real sshd):
open loop (Poisson / constant arrivals), --duration, datasets (ranged lengths, shared prefix, JSONL), goodput,
sweep with its knee and chart, progress with the time left; and the pieces that read the server's /metrics,
on /metrics text recorded from a real SGLang 0.5.23 server (tests/data/metrics/).

The stand-in serves no /metrics and reports no cached tokens: those are proven on the real CPU server
(tests/test_bench_loads_real.py).
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from sglops.bench import load_curve as sweep
from sglops.bench import loads, servermetrics
from sglops.bench import run as bench
from sglops.bench.compare import compare
from sglops.core import artifacts
from sglops.core.errors import ConfigError
from sglops.core.op import new_run_id
from sglops.host import _bench_metrics, _bench_request
from sglops.sandbox.standin_local import StandinProcess, start_standin
from sglops.views.files import draw
from sglops.views.report import render as report_markdown
from sglops.views.show import render
from tests.cases import document
from tests.inproc import run_inv

DATA = Path(__file__).parent / "data" / "metrics"
RANGE = {"test_token_range": [3, 1000]}


@pytest.fixture
def standin(use_sandbox, tmp_path):
    """A stand-in server on gpu-a's tree (the client reaches
    it on the host's 127.0.0.1); stopped afterwards."""
    servers: list[StandinProcess] = []

    def start(tps: float = 400.0, **knobs) -> int:
        server = start_standin(
            "--model-path",
            "m",
            knobs={"TPS": tps, "TTFT_MS": 5, "STARTUP_S": 0.1, **knobs},
            sglang_python=use_sandbox.host("gpu-a").sglang_root / "python",
            log=tmp_path / f"standin-{len(servers)}.log",
        )
        servers.append(server)
        server.wait_healthy(10)
        return server.port

    yield start
    for server in servers:
        server.stop()


def _recs(result: bench.BenchResult) -> list[dict]:
    return [rec for rep in result.raw for rec in rep["requests"]]


# -- open loop -------------------------------------------------------------------------------------------
def test_constant_arrivals_are_sent_on_schedule_and_counted_per_level(standin, remote_a):
    port = standin()
    events: list[dict] = []
    r = bench.run_bench(
        remote_a,
        runs=2,
        input_len=8,
        output_len=8,
        port=port,
        with_facts=False,
        request_rate=25,
        arrival="constant",
        requests=12,
        on_progress=events.append,
        test_options=RANGE,
    )
    assert r.status == "ok", r.problems()
    (lv,) = r.levels
    assert lv.request_rate == 25 and lv.concurrency == 0 and lv.outcomes == {"ok": 24}
    for rep in r.raw:
        due = [rec["sched_s"] for rec in rep["requests"]]
        # constant: exactly 1/rate apart
        assert due == pytest.approx([i / 25 for i in range(12)], abs=1e-5)
        assert all(rec["lag_s"] >= 0 for rec in rep["requests"])
        # the last arrival was sent, then waited for
        assert rep["wall_s"] >= due[-1]
    # requests/s: completed requests / (first arrival ->
    # last end), at most 12 over the 11 gaps of the schedule
    assert sorted(lv.request_throughput["values"]) == pytest.approx(
        sorted(12 / rep["wall_s"] for rep in r.raw)
    )
    assert 0 < lv.request_throughput["median"] <= 12 / (11 / 25)
    assert lv.send_lag_ms["n"] == 24 and lv.output_tok_s["median"] > 0
    doc = r.to_json()
    assert doc["config"]["loop"] == "open" and doc["config"]["arrival"] == "constant"
    assert doc["levels"][0]["request_rate"] == 25
    # progress: every level x repeat step, with the time left falling to zero
    steps = [e for e in events if e.get("steps")]
    assert steps and steps[-1]["steps"] == 2 and steps[-1]["step"] == 2 and steps[-1]["eta_s"] == 0
    assert any(e.get("eta_s") for e in steps[:-1]) or len(steps) == 1


def test_a_burst_of_new_connections_queues_at_the_standin_instead_of_resetting(tmp_path):
    """300 connections opened at once all get /health answered: the stand-in listens with a server's backlog
    (socketserver's default of 5 timed out or reset ~90 of
    them), so an open loop's figures are the client's."""
    server = start_standin(
        "--model-path", "m", knobs={"TPS": 1e6, "TTFT_MS": 0, "STARTUP_S": 0.1}, log=tmp_path / "standin.log"
    )
    errors: list[str] = []

    def one() -> None:
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
                conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                head = conn.recv(64)
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(repr(head[:32]))
        except OSError as exc:
            errors.append(type(exc).__name__)

    try:
        server.wait_healthy(10)
        threads = [threading.Thread(target=one) for _ in range(300)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.stop()
    assert errors == [], f"{len(errors)} of 300 failed: {errors[:5]}"


# The client reads HTTP straight off the socket: each framing a server may use, on a real SGLang 0.5.23 stream
REAL_GENERATE = "".join(document("stream_chunks")["streams"]["sglang"]["pieces"]).encode()
# the response head (and body) a one-shot loopback server answers with
FRAMINGS = {
    "content-length": (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
        % (len(REAL_GENERATE), REAL_GENERATE)
    ),
    "until-close": b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + REAL_GENERATE,
    "chunked-with-extension-and-trailer": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x;ext=1\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n"
        % (len(REAL_GENERATE), REAL_GENERATE)
    ),
    "length-cut-short": (
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(REAL_GENERATE) + 50, REAL_GENERATE[:-20])
    ),
    "closed-without-answer": b"",
    "not-http": b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
    "error-status": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 17\r\n\r\nServer is\nloading",
    "bad-chunk-size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\ndata: x\r\n",
}
WANT = {
    "content-length": ("ok", None),
    "until-close": ("ok", None),
    "chunked-with-extension-and-trailer": ("ok", None),
    "length-cut-short": ("dropped", "stream dropped after 1 tokens (IncompleteRead)"),
    "closed-without-answer": ("error", "RemoteDisconnected"),
    "not-http": ("error", "BadStatusLine"),
    "error-status": ("http_error", "HTTP 503: Server is loading"),
    "bad-chunk-size": ("error", "ValueError"),
}


@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_the_client_reads_every_http_framing_a_server_may_answer_with(framing):
    answer = FRAMINGS[framing]
    with socket.create_server(("127.0.0.1", 0)) as srv:
        got: list[bytes] = []

        def serve() -> None:
            conn, _ = srv.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(body) < length:
                    body += conn.recv(65536)
                got.append(data)
                conn.sendall(answer)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        rec = _bench_request.one_request(srv.getsockname()[1], "sglang", "m", [11, 22, 33, 44], 3, 10)
        thread.join(5)
    outcome, error = WANT[framing]
    assert (rec["outcome"], rec["error"] if error is None else error in (rec["error"] or "")) == (
        outcome,
        True if error else None,
    ), rec
    request = got[0]
    assert (
        request.startswith(b"POST /generate HTTP/1.1\r\n")
        and b"\r\nContent-Type: application/json\r\n" in request
    )
    assert json.loads(request.partition(b"\r\n\r\n")[2])["input_ids"] == [11, 22, 33, 44]
    if outcome == "ok":
        assert rec["tokens"] == 3 and rec["chunk_n"] == [1, 3] and rec["ids"] == [977, 8, 8]


def test_poisson_gaps_have_the_asked_mean_and_burstiness_changes_their_spread():
    import statistics

    from sglops.host._bench_load import gaps

    def spread(burst: float) -> tuple[float, float]:
        g = gaps(50, "poisson", burst, seed=3)
        xs = [next(g) for _ in range(4000)]
        return statistics.fmean(xs), statistics.stdev(xs) / statistics.fmean(xs)

    mean, cv = spread(1.0)
    # exponential: CV 1
    assert mean == pytest.approx(1 / 50, rel=0.05) and cv == pytest.approx(1.0, rel=0.08)
    # gamma shape k: CV = 1 / sqrt(k)
    assert spread(0.25)[1] > 1.7 and spread(4.0)[1] < 0.6
    assert spread(0.25)[0] == pytest.approx(1 / 50, rel=0.1)


def test_duration_bounds_a_closed_loop_level_by_the_clock(standin, remote_a):
    port = standin(tps=300)
    r = bench.run_bench(
        remote_a,
        runs=1,
        input_len=8,
        output_len=12,
        concurrency=2,
        port=port,
        with_facts=False,
        duration=1.0,
        test_options=RANGE,
    )
    assert r.status == "ok", r.problems()
    (rep,) = r.raw
    n = len(rep["requests"])
    # 2 streams x ~12 tokens at 300 tok/s: several requests each in a second
    assert n > 4
    # none started after the deadline
    assert max(rec["start_s"] for rec in rep["requests"]) < 1.0 + 0.2
    assert rep["duration_s"] == 1.0 and r.config["duration_s"] == 1.0


# -- goodput ---------------------------------------------------------------------------------------------
def test_goodput_counts_only_requests_within_every_slo(standin, remote_a):
    port = standin(tps=200)

    def run(slo: str) -> bench.Level:
        r = bench.run_bench(
            remote_a,
            runs=1,
            input_len=8,
            output_len=10,
            concurrency=2,
            requests=6,
            port=port,
            with_facts=False,
            slo=slo,
            warmup=0,
            test_options=RANGE,
        )
        assert r.status == "ok", r.problems()
        return r.levels[0]

    # TPOT at 200 tok/s is 5 ms
    loose, tight = run("ttft=60000,tpot=60000"), run("tpot=0.5")
    assert loose.goodput["share"] == 1 and loose.goodput["req_s"]["median"] == pytest.approx(
        loose.request_throughput["median"]
    )
    assert tight.goodput["share"] == 0 and tight.goodput["req_s"]["median"] == 0
    assert tight.goodput["slo"] == {"tpot_ms": 0.5}


# -- datasets --------------------------------------------------------------------------------------------
def test_shared_prefix_groups_send_each_groups_prefix_then_their_own_ids(standin, remote_a):
    port = standin()
    r = bench.run_bench(
        remote_a,
        runs=1,
        input_len=6,
        output_len=8,
        concurrency=2,
        requests=8,
        port=port,
        with_facts=False,
        dataset="shared-prefix:groups=3,prefix=20",
        test_options=RANGE,
    )
    assert r.status == "ok", r.problems()
    prompts = [e["input_ids"] for e in r.outputs]
    assert all(len(p) == 26 for p in prompts)
    # the server's own count
    assert all(rec["prompt_tokens"] == 26 for rec in _recs(r))
    heads = [tuple(p[:20]) for p in prompts]
    assert heads[0] == heads[3] == heads[6] and heads[1] == heads[4] == heads[7] and heads[2] == heads[5]
    assert len(set(heads)) == 3 and len({tuple(p[20:]) for p in prompts}) == 8
    assert r.config["dataset"] == {"kind": "shared_prefix", "groups": 3, "prefix_len": 20}
    assert r.levels[0].prompt["tokens"] == 8 * 26
    # the same seed sends the same prompts: a second run's outputs are checked prompt by prompt
    again = bench.run_bench(
        remote_a,
        runs=1,
        input_len=6,
        output_len=8,
        concurrency=2,
        requests=8,
        port=port,
        with_facts=False,
        dataset="shared-prefix:groups=3,prefix=20",
        test_options=RANGE,
    )
    assert [e["prompt"] for e in again.outputs] == [e["prompt"] for e in r.outputs]


def test_ranged_lengths_vary_per_request_and_each_is_checked_against_its_own(standin, remote_a):
    port = standin()
    r = bench.run_bench(
        remote_a,
        runs=1,
        input_len=8,
        output_len=8,
        concurrency=4,
        requests=16,
        port=port,
        with_facts=False,
        dataset="random:input=4-40,output=3-12",
        test_options=RANGE,
    )
    # no wrong_length: each request against the length it asked
    assert r.status == "ok", r.problems()
    recs = _recs(r)
    ins, outs = [rec["prompt_tokens"] for rec in recs], [rec["tokens"] for rec in recs]
    assert all(4 <= n <= 40 for n in ins) and all(3 <= n <= 12 for n in outs)
    assert len(set(ins)) > 4 and len(set(outs)) > 3
    assert outs == [rec["out_len"] for rec in recs]


def test_jsonl_prompts_text_and_ids_with_their_own_output_lengths(standin, remote_a, tmp_path):
    port = standin()
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(x)
            for x in (
                {"prompt": "the quick brown fox"},
                {"input_ids": [5, 6, 7, 8, 9]},
                {"text": "a b", "output_len": 5},
            )
        )
        + "\n"
    )
    r = bench.run_bench(
        remote_a,
        runs=1,
        output_len=7,
        concurrency=1,
        requests=6,
        port=port,
        with_facts=False,
        dataset=f"jsonl:{path}",
        test_options=RANGE,
    )
    assert r.status == "ok", r.problems()
    recs = _recs(r)
    assert [rec["tokens"] for rec in recs] == [7, 7, 5, 7, 7, 5]
    # the stand-in counts words / ids
    assert [rec["prompt_tokens"] for rec in recs][:3] == [4, 5, 2]
    assert r.outputs[0]["input_ids"] == "the quick brown fox" and r.outputs[1]["input_ids"] == [5, 6, 7, 8, 9]
    keys = [e["prompt"] for e in r.outputs]
    # text keyed apart from ids
    assert keys[0] == keys[3] and keys[0].startswith("t") and keys[0] != keys[1]
    assert r.config["dataset"] == {"kind": "prompts", "source": str(path)}


# -- sweep -----------------------------------------------------------------------------------------------
def test_sweep_is_one_record_with_its_curve_knee_and_chart_and_compare_overlays_two(
    standin, use_sandbox, capsys
):
    port = standin(tps=500)
    ids = []
    for _ in range(2):
        code, out, err = run_inv(
            capsys,
            "bench",
            "--host",
            "gpu-a",
            "--port",
            str(port),
            "--json",
            "--runs",
            "1",
            "--input-len",
            "8",
            "--output-len",
            "12",
            "--sweep",
            "concurrency=1,2,4",
            "--requests",
            "4",
            "--vocab-size",
            "1000",
        )
        assert code == 0, err
        doc = json.loads(out)
        assert [lv["concurrency"] for lv in doc["levels"]] == [1, 2, 4]
        pts = doc["sweep"]["points"]
        assert [p["load"] for p in pts] == [1, 2, 4] and all(p["total_tok_s"] > 0 for p in pts)
        assert doc["sweep"]["knee"]["load"] in (1, 2, 4) and "knee at" in doc["sweep"]["knee"]["line"]
        assert Path(doc["sweep"]["chart"]).stat().st_size > 10_000
        ids.append(doc["run_id"])
    md = report_markdown(artifacts.find_run(ids[0]))
    assert "Sweep: knee at" in md and "![sweep](" in md and "| C=4 |" in md
    # the runner's run id, as `inv compare` hands it down
    cmp = compare(ids, draw=draw, run_id=new_run_id())
    overlay = [n for n in cmp.notes if n.startswith("sweep chart: ")]
    assert overlay and Path(overlay[0].split(": ", 1)[1]).stat().st_size > 10_000
    assert sum("knee at" in n for n in cmp.notes) == 2


def test_the_knee_is_the_lowest_load_within_reach_of_the_peak():
    def lv(c: int, total: float, tpot: float) -> dict:
        return {
            "concurrency": c,
            "output_tok_s": {"median": total},
            "decode_tok_s": {"median": total / c},
            "tpot_ms": {"median": tpot, "p99": tpot * 2},
            "status": "ok",
        }

    s = sweep.summary([lv(8, 950, 8.4), lv(1, 100, 10), lv(2, 200, 10), lv(4, 920, 4.3), lv(16, 1000, 16)])
    assert [p["load"] for p in s["points"]] == [1, 2, 4, 8, 16]
    # 920 >= 0.9 x 1000; 200 is not
    assert s["knee"]["load"] == 4 and s["knee"]["peak_tok_s"] == 1000
    assert "x0.43" in s["knee"]["line"]
    assert sweep.knee(sweep.points([lv(1, 100, 10)])) is None


# -- bad input: one line, exit 2, nothing written ----------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--dataset", "shared-prefix:groups=2"), "needs groups=N and prefix=L"),
        (("--dataset", "random:input=9-3"), "low <= high"),
        (("--dataset", "jsonl:/nonexistent/p.jsonl"), "no such file"),
        (("--slo", "ttfb=3"), "--slo must be like"),
        (("--slo", "ttft=-1"), "positive"),
        (("--sweep", "rate="), "names no value"),
        (("--sweep", "streams=1,2"), "--sweep must be"),
        (("--request-rate", "2", "--concurrency", "4"), "a level is an open loop"),
        (("--duration", "1", "--requests", "3"), "bounded by one of them"),
        (("--burstiness", "0"), "--burstiness must be"),
    ],
)
def test_bad_load_flags_are_one_line_and_exit_2_before_any_host(use_sandbox, capsys, args, says):
    code, out, err = run_inv(capsys, "bench", "--host", "gpu-a", "--port", "9", *args)
    assert code == 2, (out, err)
    assert says in err and len(err.strip().splitlines()) == 1
    assert not (artifacts.artifacts_root()).exists() or not any(
        artifacts.artifacts_root().rglob("bench.json")
    )


def test_a_jsonl_line_that_is_not_a_prompt_is_named_with_its_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ok"}\n\n{"input_ids": [1, "x"]}\n')
    with pytest.raises(ConfigError, match=r"p\.jsonl:3: input_ids must be"):
        loads.parse_dataset(f"jsonl:{path}")


# -- the server's /metrics, as a real SGLang 0.5.23 server wrote them
# -------------------------------------------
def test_metrics_text_of_a_real_server_is_read_into_the_few_figures_kept():
    busy = _bench_metrics.parse((DATA / "sglang-0.5.23-6-running.prom").read_text())
    assert busy["running"] == 6 and busy["queued"] == 0
    assert busy["cache_hit_rate"] == pytest.approx(0.95238, rel=1e-4) and busy["token_usage"] == 0.08
    assert busy["gen_throughput"] == pytest.approx(413.8176, rel=1e-6)
    # two label sets (is_streaming false / true) summed
    assert busy["prompt_tokens"] == 140
    idle = _bench_metrics.parse((DATA / "sglang-0.5.23-idle.prom").read_text())
    assert idle["running"] == 0 and idle["generation_tokens"] == 8
    assert _bench_metrics.parse("# HELP x\nother_metric 3\n") == {}


def test_server_figures_over_a_level_come_from_counter_rises_and_gauges():
    samples = [
        {"t": 0.0, "running": 0, "generation_tokens": 100, "gen_throughput": 0.0},
        {
            "t": 1.0,
            "running": 4,
            "queued": 2,
            "generation_tokens": 500,
            "gen_throughput": 400.0,
            "cache_hit_rate": 0.5,
            "token_usage": 0.3,
        },
        {
            "t": 2.0,
            "running": 4,
            "queued": 0,
            "generation_tokens": 900,
            "gen_throughput": 440.0,
            "cache_hit_rate": 0.6,
            "token_usage": 0.2,
        },
    ]
    s = servermetrics.summarise([samples, []])
    # (900 - 100) / 2 s
    assert s["gen_tok_s"] == 400
    # median of 400/4, 440/4
    assert s["decode_tok_s_per_stream"] == 105
    assert s["running"] == {"median": 4, "max": 4} and s["queued"]["max"] == 2
    assert s["cache_hit_rate"] == 0.6 and s["token_usage_max"] == 0.3 and s["samples"] == 3
    assert servermetrics.summarise([[], []]) is None


# -- JSON shape: existing fields unchanged --------------------------------------------------------------
def test_a_plain_bench_keeps_every_field_it_had_and_shows_its_load(standin, remote_a):
    port = standin()
    r = bench.run_bench(
        remote_a,
        runs=1,
        input_len=8,
        output_len=8,
        concurrency=1,
        port=port,
        with_facts=False,
        test_options=RANGE,
    )
    doc = r.to_json()
    old_level = {
        "concurrency",
        "status",
        "requests",
        "outcomes",
        "errors",
        "suspect",
        "suspect_examples",
        "decode_tok_s",
        "output_tok_s",
        "ttft_ms",
        "itl_ms",
        "tpot_ms",
        "e2e_ms",
        "per_request",
        "client_cpu_us_per_token",
        "itl_basis",
    }
    assert old_level <= set(doc["levels"][0]) and doc["levels"][0]["concurrency"] == 1
    assert doc["config"]["concurrency"] == [1] and doc["config"]["requests_per_run"] in ({"1": 1}, {1: 1})
    assert doc["config"]["loop"] == "closed" and doc["levels"][0]["request_rate"] is None
    assert r.levels[0].load == "C=1"
    text = render(r)
    from rich.console import Console

    con = Console(width=200, record=True)
    con.print(text)
    # the caption wraps at the table's width
    shown = " ".join(con.export_text().split())
    assert "closed loop" in shown and "server metrics: /metrics answered HTTP 404" in shown


# -- bench_serving's module: the new path first, the old
# one on older releases (issue 25 item 5) ---------------
@pytest.mark.parametrize(
    ("release", "module"),
    [
        ("0.5.23", "sglang.benchmark.serving"),
        ("0.5.17", "sglang.benchmark.serving"),
        ("0.4.10", "sglang.bench_serving"),
    ],
)
def test_bench_serving_is_found_at_its_new_path_and_falls_back_on_older_releases(release, module):
    import os
    import sys

    from benchmarks.bench_vs_bench_serving import find_serving_module
    from sglops.sandbox.trees import sglang_template

    tree = sglang_template(release)
    env = {**os.environ, "PYTHONPATH": str(tree / "python")}
    assert find_serving_module(sys.executable, env) == module
    with pytest.raises(SystemExit, match="no SGLang bench_serving"):
        # no sglang package there
        find_serving_module(sys.executable, {**os.environ, "PYTHONPATH": str(tree)})


def test_the_live_board_says_where_a_long_run_is_and_the_time_left():
    from sglops.views.bench import progress_note

    ev = {
        "phase": "measuring",
        "done": 30,
        "total": 90,
        "step": 4,
        "steps": 10,
        "repeat": 2,
        "runs": 2,
        "concurrency": 8,
        "request_rate": None,
        "eta_s": 125.4,
    }
    assert progress_note(ev) == " C=8, repeat 2/2 (step 4/10), ~2:05 left"
    assert (
        progress_note({**ev, "concurrency": 0, "request_rate": 2.5, "eta_s": None})
        == " 2.5 req/s, repeat 2/2 (step 4/10)"
    )
    assert progress_note({"phase": "warm-up", "done": 0}) == ""


def test_the_bench_serving_summary_states_the_paired_floor_for_one_round_and_several():
    from benchmarks.bench_vs_bench_serving import floor_lines, summarise

    def pair(rnd: int, mine: float, theirs: float) -> dict:
        fig = {
            "ttft_ms": 1.0,
            "itl_ms": 1.0,
            "e2e_ms": 1.0,
            "output_tok_s": None,
            "server_gen_tok_s": None,
            "decode_vs_server": None,
            "client_cpu_us_per_token": None,
        }
        return {
            "round": rnd,
            "api": "sglang",
            "c": 1,
            "sglops": {**fig, "tpot_ms": mine, "decode_tok_s": 1000 / mine},
            "bench_serving": {**fig, "tpot_ms": theirs, "decode_tok_s": 1000 / theirs},
        }

    one = floor_lines(summarise([pair(0, 10.0, 10.0)]))
    assert len(one) == 2 and "(one round)" in one[0] and "within 1% shown" in one[0]
    lines = floor_lines(summarise([pair(0, 10.0, 10.0), pair(1, 11.0, 10.0), pair(2, 9.5, 10.0)]))
    tpot = next(x for x in lines if "tpot_ms" in x)
    assert "range 0.9500-1.1000 over 3 round(s)" in tpot and "floor this server allows is +-10.0%" in tpot
