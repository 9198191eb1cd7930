"""Production loads against the REAL SGLang 0.5.23 CPU server (the run's shared `cpu_server`, reached through
a sandbox sshd host with --port): a timed_trace replayed at its timestamps, and multi-turn sessions whose
later turns the server's own prefix cache serves (its meta_info.cached_tokens), with GPU telemetry (the
sandbox host's stand-in nvidia-smi) labelled stand-in beside the real server's figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import require_real_server_env

from sglops.bench import run as bench

pytestmark = pytest.mark.real_server
DATA = Path(__file__).parent / "data" / "workloads"


@pytest.fixture
def server(cpu_server):
    require_real_server_env()
    return cpu_server


def test_a_timed_trace_replays_on_the_real_server_at_its_timestamps(server, remote_a):
    r = bench.run_bench(
        remote_a,
        runs=1,
        port=server.port,
        with_facts=False,
        trace_speed=4.0,
        dataset=f"trace:{DATA / 'timed_trace_sample.jsonl'}",
    )
    assert r.status == "ok", r.problems()
    (lv,) = r.levels
    recs = r.raw[0]["requests"]
    assert [rec["sched_s"] for rec in recs] == pytest.approx([0, 0.125, 0.125, 0.3125], abs=1e-6)
    # the server's own count: lengths from the trace
    assert [rec["prompt_tokens"] for rec in recs] == [40, 20, 36, 5]
    assert [rec["tokens"] for rec in recs] == [12, 6, 10, 4]
    # sent on time, not after the one before
    assert lv.send_lag_ms["n"] == 4 and lv.send_lag_ms["median"] < 50
    # the sandbox host's nvidia-smi: labelled, never a GPU's figure
    assert lv.gpu["standin"] is True


def test_later_turns_of_a_session_are_served_from_the_servers_prefix_cache(server, remote_a):
    r = bench.run_bench(
        remote_a,
        runs=1,
        port=server.port,
        with_facts=False,
        concurrency=2,
        output_len=8,
        dataset="sessions:count=2,turns=3,system=16,new=8",
    )
    assert r.status == "ok", r.problems()
    (lv,) = r.levels
    turns = {t["turn"]: t for t in lv.turns}
    # history + answers + new
    assert [turns[t]["prompt_tokens"] for t in (1, 2, 3)] == [2 * 24, 2 * 40, 2 * 56]
    # turn 2 and 3: everything but the new ids (and the last
    # answer token) came from the cache, as the server says
    assert turns[2]["cache_hit"] > 0.6 and turns[3]["cache_hit"] > 0.7, lv.turns
    assert turns[1]["ttft_ms"]["n"] == 2 and turns[3]["ttft_ms"]["n"] == 2


def test_sessions_over_the_chat_endpoint_carry_the_answers_and_report_cached_tokens(server, remote_a):
    r = bench.run_bench(
        remote_a,
        runs=1,
        port=server.port,
        with_facts=False,
        concurrency=2,
        output_len=8,
        api="openai-chat",
        dataset="sessions:count=2,turns=3,system=16,new=8",
    )
    assert r.status == "ok", r.problems()
    (lv,) = r.levels
    outs = {(o["n"] // 3, o["n"] % 3): o for o in r.outputs}
    for s in range(2):
        third = outs[s, 2]["input_ids"]
        assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant", "user"]
        # the server's own answers, as it streamed them, carried into the next turn
        assert third[2]["content"] == outs[s, 0]["text"] and third[4]["content"] == outs[s, 1]["text"]
        # SGLang's output ids (sglext), eight per turn
        assert all(len(outs[s, t]["ids"]) == 8 for t in range(3))
    turns = {t["turn"]: t for t in lv.turns}
    # the conversation grows by an answer and a question per turn (the server's count, its chat template)
    assert turns[1]["prompt_tokens"] < turns[2]["prompt_tokens"] < turns[3]["prompt_tokens"]
    # without --enable-cache-report: sglext.cached_tokens_details; the history of turns 2 and 3 came from the
    # prefix cache (re-tokenized answers may differ at their edges: not all of it)
    assert turns[2]["cache_hit"] > 0.5 and turns[3]["cache_hit"] > 0.6, lv.turns
    # per turn, per session; a turn whose 8 tokens the loaded server sent in one chunk has no TPOT
    assert turns[3]["ttft_ms"]["n"] == 2
    assert turns[3]["tpot_ms"] is None or 1 <= turns[3]["tpot_ms"]["n"] <= 2
