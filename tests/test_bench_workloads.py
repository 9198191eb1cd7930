"""Loads from production against the stand-in server on a sandbox host (real sshd): a trace replayed at its
timestamps (mooncake and vLLM timed_trace layouts, tests/data/workloads/). The real CPU server's side is
tests/test_bench_workloads_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglops.bench import max_rate, pareto
from sglops.bench import run as bench
from sglops.bench.compare import compare
from sglops.bench.plan import plan_bench
from sglops.core import artifacts
from sglops.core.errors import ConfigError
from sglops.core.op import new_run_id
from sglops.host import telemetry
from sglops.sandbox.standin_local import StandinProcess, start_standin
from sglops.views.bench import bench_table as render_table
from sglops.views.files import draw
from tests.inproc import run_inv

DATA = Path(__file__).parent / "data" / "workloads"
RANGE = {"test_token_range": [3, 1000]}


@pytest.fixture
def standin(use_sandbox, tmp_path):
    servers: list[StandinProcess] = []

    def start(tps: float = 400.0, args: tuple[str, ...] = (), **knobs) -> int:
        server = start_standin(
            "--model-path",
            "m",
            *args,
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


# -- trace replay -------------------------------------------------------------------------------------------
def test_both_trace_layouts_parse_with_their_units_and_blocks():
    moon = plan_bench({"dataset": f"trace:{DATA / 'mooncake_sample.jsonl'}"}).dataset
    assert (moon["layout"], moon["unit"], moon["block"], moon["requests"]) == ("mooncake", "ms", 512, 5)
    assert [it["t"] for it in moon["items"]] == [0, 0.25, 0.25, 0.9, 1.4]
    # a 1-token output has no TPOT
    assert moon["items"][4]["out"] == 2 and moon["outputs_raised_to_2"] == 1
    timed = plan_bench({"dataset": f"trace:{DATA / 'timed_trace_sample.jsonl'}"}).dataset
    assert (timed["layout"], timed["unit"], timed["block"]) == ("timed_trace", "s", 16)
    assert timed["items"][3]["ids"] == [11, 12, 13, 14, 15] and timed["items"][0]["blocks"] == [0, 1, 2]
    fast = plan_bench({"dataset": f"trace:{DATA / 'mooncake_sample.jsonl'},unit=s,block=500"}).dataset
    assert fast["span_s"] == 1400 and fast["block"] == 500


@pytest.mark.parametrize(
    "bad, says",
    [
        ("trace:/no/such.jsonl", "no such file"),
        ("trace:{d}/mooncake_sample.jsonl,layout=azure", "layout must be"),
        ("trace:{d}/mooncake_sample.jsonl,block=4096", "more than input_length"),
    ],
)
def test_a_bad_trace_is_one_line(bad, says):
    with pytest.raises(ConfigError, match=says):
        plan_bench({"dataset": bad.format(d=DATA)})
    with pytest.raises(ConfigError, match="--trace-speed"):
        plan_bench({"dataset": f"trace:{DATA / 'mooncake_sample.jsonl'}", "request_rate": 4})


def test_a_trace_is_sent_at_its_timestamps_with_its_lengths_and_shared_blocks(standin, remote_a):
    port = standin()
    r = bench.run_bench(
        remote_a,
        runs=2,
        port=port,
        with_facts=False,
        dataset=f"trace:{DATA / 'timed_trace_sample.jsonl'}",
        trace_speed=2.0,
        test_options=RANGE,
    )
    assert r.status == "ok", r.problems()
    (lv,) = r.levels
    assert lv.load == "trace x2" and lv.outcomes == {"ok": 8} and lv.send_lag_ms["n"] == 8
    for rep in r.raw:
        assert [rec["sched_s"] for rec in rep["requests"]] == pytest.approx([0, 0.25, 0.25, 0.625], abs=1e-6)
        assert [rec["tokens"] for rec in rep["requests"]] == [12, 6, 10, 4]
    ins = [o["input_ids"] for o in r.outputs]
    assert [len(x) for x in ins[:4]] == [40, 20, 36, 5] and ins[3] == [11, 12, 13, 14, 15]
    assert ins[0][:32] == ins[2][:32] and ins[0][:16] == ins[1][:16] and ins[0][16:32] != ins[1][16:32]
    # the next repeat draws other blocks: its replay finds no warm cache
    assert ins[0][:16] != ins[4][:16]
    again = bench.run_bench(
        remote_a,
        runs=2,
        port=port,
        with_facts=False,
        dataset=f"trace:{DATA / 'timed_trace_sample.jsonl'}",
        trace_speed=2.0,
        test_options=RANGE,
    )
    # the same seed: the same prompts, outputs comparable
    assert [o["input_ids"] for o in again.outputs] == ins
    assert r.config["flags"]["trace_speed"] == 2.0 and r.config["loop"] == "open"


def test_a_trace_with_its_prompts_text_sends_the_text_for_the_server_to_tokenize(standin, remote_a, tmp_path):
    """A timed_trace whose records carry `prompt` (text) is replayed as text (/generate's `text`): the server
    tokenizes it inside TTFT, as for a client that sends text; records with ids keep their ids."""
    trace = tmp_path / "text_trace.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 6, "output_length": 4, "prompt": "hello there, the first request"},
        {"timestamp": 0.1, "input_length": 3, "output_length": 4, "prompt_ids": [7, 8, 9]},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    d = plan_bench({"dataset": f"trace:{trace}"}).dataset
    assert d["layout"] == "timed_trace" and d["items"][0]["ids"] == "hello there, the first request"
    port = standin()
    r = bench.run_bench(
        remote_a, runs=1, port=port, with_facts=False, dataset=f"trace:{trace}", test_options=RANGE
    )
    assert r.status == "ok", r.problems()
    # what each request sent, as recorded for output identity
    assert [o["input_ids"] for o in r.outputs] == ["hello there, the first request", [7, 8, 9]]
    both = tmp_path / "both.jsonl"
    both.write_text(json.dumps({**rows[0], "prompt_ids": [1, 2]}) + "\n")
    with pytest.raises(ConfigError, match="prompt and prompt_ids both given"):
        plan_bench({"dataset": f"trace:{both}"})


# -- multi-turn sessions
# --------------------------------------------------------------------------------------
def test_each_turn_carries_the_history_and_the_servers_own_answer(standin, remote_a):
    port = standin()
    r = bench.run_bench(
        remote_a,
        runs=1,
        port=port,
        with_facts=False,
        concurrency=2,
        output_len=5,
        dataset="sessions:count=3,turns=3,system=6,new=4",
        test_options=RANGE,
    )
    assert r.status == "ok", r.problems()
    (lv,) = r.levels
    recs = [rec for rep in r.raw for rec in rep["requests"]]
    assert [(rec["session"], rec["turn"]) for rec in recs] == [(s, t) for s in range(3) for t in range(3)]
    outs = {(o["n"] // 3, o["n"] % 3): o for o in r.outputs}
    for s in range(3):
        first, second, third = (outs[s, t] for t in range(3))
        assert len(first["input_ids"]) == 6 + 4 and outs[0, 0]["input_ids"][:6] == first["input_ids"][:6]
        # history + the server's answer
        assert second["input_ids"][:15] == first["input_ids"] + first["ids"]
        assert len(second["input_ids"]) == 10 + 5 + 4 and len(third["input_ids"]) == 19 + 5 + 4
        assert third["input_ids"][:24] == second["input_ids"] + second["ids"]
    # turns of one session are sequential: each starts after the one before ended
    for s in range(3):
        mine = [rec for rec in recs if rec["session"] == s]
        assert all(
            b["start_s"] >= a["start_s"] + a["e2e_s"] - 1e-3 for a, b in zip(mine, mine[1:], strict=False)
        )
    # sessions run two at once: the second session started before the first one ended
    assert recs[3]["start_s"] < recs[2]["start_s"]
    assert [t["turn"] for t in lv.turns] == [1, 2, 3] and all(t["requests"] == 3 for t in lv.turns)
    assert lv.turns[2]["prompt_tokens"] is None or lv.turns[2]["prompt_tokens"] > lv.turns[0]["prompt_tokens"]


def test_chat_sessions_send_messages_with_the_servers_answers_and_report_cached_tokens(standin, remote_a):
    port = standin()
    r = bench.run_bench(
        remote_a,
        runs=1,
        port=port,
        with_facts=False,
        concurrency=2,
        output_len=5,
        api="openai-chat",
        dataset="sessions:count=3,turns=3,system=6,new=4",
        test_options=RANGE,
    )
    assert r.status == "ok", r.problems()
    (lv,) = r.levels
    outs = {(o["n"] // 3, o["n"] % 3): o for o in r.outputs}
    for s in range(3):
        first, second, third = (outs[s, t]["input_ids"] for t in range(3))
        # a system message (the stand-in's text of the 6 system ids: a word each), then user / assistant
        assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant", "user"]
        assert len(first[0]["content"].split()) == 6 and len(first[1]["content"].split()) == 4
        assert first[0] == outs[0, 0]["input_ids"][0]
        # the history as sent, then the server's own answer (its text) as the assistant's message
        assert second[:2] == first and second[2] == {"role": "assistant", "content": outs[s, 0]["text"]}
        assert third[:4] == second and third[4]["content"] == outs[s, 1]["text"]
        # SGLang's sglext output ids, kept for identity
        assert len(outs[s, 0]["ids"]) == 5
    turns = {t["turn"]: t for t in lv.turns}
    # no --enable-cache-report: the server's count from sglext.cached_tokens_details, its prefix cache served
    # the history of later turns (the stand-in's cache, in words)
    assert turns[1]["cached_tokens"] is not None and turns[3]["cache_hit"] > turns[1]["cache_hit"]
    assert turns[3]["cache_hit"] > 0.6 and turns[2]["tpot_ms"]["n"] == 3
    # the same seed: the same texts
    again = bench.run_bench(
        remote_a,
        runs=1,
        port=port,
        with_facts=False,
        concurrency=2,
        output_len=5,
        api="openai-chat",
        dataset="sessions:count=3,turns=3,system=6,new=4",
        test_options=RANGE,
    )
    assert [o["input_ids"] for o in again.outputs] == [o["input_ids"] for o in r.outputs]


def test_chat_sessions_send_a_files_texts_as_given(standin, remote_a, tmp_path):
    port = standin(args=("--enable-cache-report",))
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps({"sessions": [["sys a b\n\nq1", "q2 c"], ["sys a b\n\nq3", "q4 d e"]]}))
    r = bench.run_bench(
        remote_a,
        runs=1,
        port=port,
        with_facts=False,
        output_len=3,
        api="openai-chat",
        dataset=f"sessions:texts={texts}",
        test_options=RANGE,
    )
    assert r.status == "ok", r.problems()
    sent = [o["input_ids"] for o in r.outputs]
    assert sent[0] == [{"role": "user", "content": "sys a b\n\nq1"}]
    assert sent[3][0]["content"] == "sys a b\n\nq3" and sent[3][2] == {"role": "user", "content": "q4 d e"}
    assert r.levels[0].requests_total == 4
    # usage.prompt_tokens_details (--enable-cache-report): the second turn's history came from the cache
    assert r.levels[0].turns[1]["cached_tokens"] > 0


def test_the_chat_api_takes_text_and_texts_take_the_chat_api(tmp_path):
    with pytest.raises(ConfigError, match="--api openai-chat sends chat messages"):
        plan_bench({"api": "openai-chat"})
    texts = tmp_path / "t.json"
    texts.write_text(json.dumps({"sessions": [["a", "b"]]}))
    with pytest.raises(ConfigError, match="needs --api openai-chat"):
        plan_bench({"dataset": f"sessions:texts={texts}"})
    with pytest.raises(ConfigError, match="holds 1 sessions"):
        plan_bench({"dataset": f"sessions:texts={texts},count=2", "api": "openai-chat"})
    texts.write_text(json.dumps({"sessions": [["a", 3]]}))
    with pytest.raises(ConfigError, match="every session a non-empty list of texts"):
        plan_bench({"dataset": f"sessions:texts={texts}", "api": "openai-chat"})
    ok = plan_bench({"dataset": "sessions:count=2,turns=2,new=4", "api": "openai-chat"})
    assert ok.dataset["count"] == 2


def test_a_bad_sessions_spec_is_one_line():
    with pytest.raises(ConfigError, match="needs count=N, turns=T and new=M"):
        plan_bench({"dataset": "sessions:count=3"})
    with pytest.raises(ConfigError, match="turns must be a whole number from 1 to 64"):
        plan_bench({"dataset": "sessions:count=3,turns=0,new=4"})


# -- the largest rate under an SLO
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("boundary, start", [(7.3, 1.0), (0.37, 4.0), (100.0, 90.0)])
def test_the_search_brackets_then_bisects_to_within_five_percent_in_eight_levels(boundary, start):
    """A server whose goodput share falls from 1 to 0 at
    `boundary` req/s: the answer lies within 5% below it."""
    seen = []

    def probe(rate, phase):
        seen.append((rate, phase))
        return (1.0 if rate <= boundary else 0.5), f"p{len(seen)}"

    s = max_rate.search(probe, {"ttft_ms": 100.0}, 0.9, start)
    assert s.converged and len(s.probes) <= 8, s.to_json()
    assert s.answer <= boundary < s.bound <= s.answer * 1.05**2 and abs(s.boundary / boundary - 1) <= 0.05
    # bracket first, then bisect
    assert [p.phase for p in s.probes] == sorted((p.phase for p in s.probes), reverse=True)
    assert s.to_json()["probes"][0]["run_id"] == "p1" and "+-5%" in s.line()


def test_max_rate_needs_an_slo_and_an_open_loop():
    with pytest.raises(ConfigError, match="--max-rate needs --slo"):
        plan_bench({"max_rate": True})
    with pytest.raises(ConfigError, match="not with --sweep"):
        plan_bench({"max_rate": True, "slo": "ttft=100", "sweep": "rate=1,2"})


# -- the Pareto frontier
# ----------------------------------------------------------------------------------------
def test_the_frontier_keeps_only_points_nothing_beats_on_both_axes():
    pts = [
        {"config": c, "load": ld, "per_user_tok_s": u, "per_gpu_tok_s": g}
        for c, ld, u, g in [
            ("a", "C=1", 100, 50),
            ("a", "C=8", 60, 320),
            ("b", "C=1", 90, 40),
            ("b", "C=8", 70, 310),
            ("c", "C=4", 60, 320),
        ]
    ]
    par = pareto.frontier(pts)
    assert [(p["config"], p["load"]) for p in par["frontier"]] == [
        ("a", "C=8"),
        ("c", "C=4"),
        ("b", "C=8"),
        ("a", "C=1"),
    ]
    assert par["configs"] == ["a", "c", "b"] and not par["points"][2]["on_frontier"]
    assert pareto.gpus({"launch_args": {"tp_size": 4, "dp_size": 2}})["n"] == 8
    assert pareto.gpus({"launch_args": {"tp_size": 4, "dp_size": 2, "enable_dp_attention": True}})["n"] == 4
    assert pareto.gpus({"facts": {"gpus": [{}, {}]}}) == {"n": 2, "from": "the host's GPUs (facts)"}


def test_compare_of_several_runs_draws_the_frontier(standin, remote_a, tmp_path):
    ids = []
    for tps in (300.0, 900.0):
        port = standin(tps)
        r = bench.run_bench(
            remote_a,
            runs=1,
            output_len=8,
            port=port,
            with_facts=False,
            sweep="concurrency=1,3",
            requests=3,
            test_options=RANGE,
        )
        ids.append(bench.record(r, new_run_id()).run_id)
    comp = compare(ids, out_dir=tmp_path, draw=draw, run_id="t")
    par = comp.pareto
    assert len(par["points"]) == 4 and {p["load"] for p in par["points"]} == {"C=1", "C=3"}
    assert par["frontier"] and all(
        p["gpus"] == 1 and p["gpus_from"].startswith("server parallelism tp 1") for p in par["points"]
    )
    assert {p["config"].split(" ", 1)[1] for p in par["points"]} == {
        "(standin_decode_tps=300.0)",
        "(standin_decode_tps=900.0)",
    }
    assert Path(par["chart"]).is_file() and any(n.startswith("Pareto frontier") for n in comp.notes)


# -- GPU telemetry
# ----------------------------------------------------------------------------------------------
def test_every_level_carries_the_hosts_gpu_telemetry_labelled_stand_in(standin, remote_a):
    port = standin()
    r = bench.run_bench(
        remote_a,
        runs=2,
        output_len=30,
        port=port,
        with_facts=False,
        concurrency="1,2",
        telemetry_interval=100,
        test_options=RANGE,
    )
    tel = r.telemetry
    assert (
        tel["source"] == "nvidia-smi (sglops stand-in: no GPU)"
        and tel["standin"] is True
        and not tel["errors"]
    )
    assert tel["sampler"]["cpu_s_per_s"] is not None and tel["sampler"]["wall_s"] > 0
    for lv in r.levels:
        assert lv.gpu["standin"] is True and lv.gpu["gpus"] == 8 and lv.gpu["samples"] >= 8, lv.gpu
        # a stand-in reports no clock
        assert lv.gpu["sm_clock_mhz"] == {"median": 0, "min": 0, "max": 0}
    starts = [rep["started"] for rep in r.raw]
    # sampled while measuring, not before
    assert min(row[0] for row in tel["samples"]) >= min(starts) - 1
    assert "STAND-IN: no GPU" in render_text(r)
    off = bench.run_bench(
        remote_a, runs=1, output_len=8, port=port, with_facts=False, telemetry_interval=0, test_options=RANGE
    )
    assert off.levels[0].gpu == {"absent": "not asked (--telemetry-interval 0)"}


def test_a_host_without_gpus_reports_them_absent(tmp_path, monkeypatch):
    # no nvidia-smi, and the test python has no NVML binding
    monkeypatch.setenv("PATH", str(tmp_path))
    got = telemetry.Sampler(50).start().stop()
    assert got["absent"].startswith("no GPU telemetry") and got["samples"] == [] and got["source"] is None


def render_text(result) -> str:
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=200).print(render_table(result))
    return buf.getvalue()


def test_inv_bench_max_rate_records_every_probe_and_one_table_and_chart(standin, capsys):
    port = standin(tps=2000)
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
        "4",
        "--output-len",
        "4",
        "--max-rate",
        "--slo",
        "ttft=60000,tpot=60000",
        "--request-rate",
        "4",
        "--requests",
        "3",
        "--vocab-size",
        "1000",
    )
    assert code == 0, err
    doc = json.loads(out)
    search = doc["max_rate"]
    probes = search["probes"]
    met = [p["rate"] for p in probes if p["met"]]
    assert probes[0]["rate"] == 4.0 and len(probes) <= 8
    assert search["answer_req_s"] == (max(met) if met else None)
    # the usual case: never missed, doubled 8 times
    if all(p["met"] for p in probes):
        assert [p["rate"] for p in probes] == [4.0 * 2**k for k in range(8)]
        assert search["bound_req_s"] is None and "every probed rate met" in search["line"]
    # a loaded machine can make the stand-in burst its tokens (suspect requests count against goodput)
    else:
        assert search["bound_req_s"] == min(p["rate"] for p in probes if not p["met"])
    # the record's levels in rate order, the probes in the order searched (a miss then bisects below it)
    assert [lv["request_rate"] for lv in doc["levels"]] == sorted(p["rate"] for p in search["probes"])
    # each level a normal record of its own
    for p in search["probes"]:
        probe = json.loads((artifacts.find_run(p["run_id"]) / "bench.json").read_text())
        assert probe["status"] == "ok" and [lv["request_rate"] for lv in probe["levels"]] == [p["rate"]]
    assert Path(search["chart"]).is_file() and Path(doc["sweep"]["chart"]).is_file()
