"""Bench loads against a REAL SGLang 0.5.23 CPU server with --enable-metrics (the run's shared `cpu_server`,
reached through a sandbox sshd host with --port): an open loop of shared-prefix prompts, the server's prefix
cache seen in its own usage fields, and its /metrics scraped during the level beside the client's figures.
"""

from __future__ import annotations

import pytest
from suite_server import SHARED_FLAGS

from sglops.bench import run as bench

pytestmark = pytest.mark.real_server
PREFIX, SUFFIX, OUT = 48, 8, 24


@pytest.fixture
def metrics_server(cpu_server):
    """The run's shared real server (conftest `cpu_server`),
    which runs with --enable-metrics for this module."""
    assert "--enable-metrics" in SHARED_FLAGS
    return cpu_server


def test_open_loop_shared_prefix_with_the_servers_cache_and_metrics(metrics_server, remote_a):
    r = bench.run_bench(
        remote_a,
        runs=1,
        input_len=SUFFIX,
        output_len=OUT,
        port=metrics_server.port,
        with_facts=False,
        request_rate=6,
        requests=12,
        metrics_interval=0.2,
        dataset=f"shared-prefix:groups=2,prefix={PREFIX}",
        slo="ttft=60000,tpot=60000",
    )
    assert r.status == "ok", r.problems()
    (lv,) = r.levels
    recs = [rec for rep in r.raw for rec in rep["requests"]]
    # the server's own count
    assert [rec["prompt_tokens"] for rec in recs] == [PREFIX + SUFFIX] * 12
    # the radix cache: after each group's first request,
    # the prefix is served from it (meta_info.cached_tokens)
    hits = [rec["cached_tokens"] for rec in recs[2:]]
    assert sum(h >= PREFIX - 1 for h in hits) >= 8, hits
    assert lv.prompt["cached_tokens"] == sum(rec["cached_tokens"] for rec in recs) > 0
    assert 0.5 < lv.prompt["cached_share"] < 1
    # the open loop: 12 arrivals, sent when due, whatever the server did
    assert lv.request_rate == 6 and lv.outcomes == {"ok": 12} and lv.send_lag_ms["n"] == 12
    # goodput: every request whose figures are sound meets a 60 s SLO; a suspect one (impossible figures, e.g.
    # a stall on a machine whose cores the server shares) never counts as good: share = sound / all
    sound = 12 - sum(lv.suspect.values())
    assert sound >= 6 and lv.goodput["share"] == sound / 12, (lv.suspect, lv.suspect_examples)
    # the server's own figures beside the client's
    srv = lv.server
    assert srv["samples"] >= 5 and srv["running"]["max"] >= 1
    assert srv["gen_tok_s"] > 0 and srv["request_decode_tok_s"] > 0
    assert 0 < srv["cache_hit_rate"] <= 1
    assert r.config["server_metrics"] == "scraped"
    # the server's decode rate and the client's measure the same requests: same order of magnitude
    assert 0.2 < lv.decode_tok_s["median"] / srv["request_decode_tok_s"] < 5


def test_openai_api_counts_the_prompt_but_reports_no_cache_without_cache_report(metrics_server, remote_a):
    r = bench.run_bench(
        remote_a,
        runs=1,
        input_len=SUFFIX,
        output_len=OUT,
        port=metrics_server.port,
        api="openai",
        with_facts=False,
        concurrency=2,
        requests=4,
        metrics_interval=0,
        dataset=f"shared-prefix:groups=1,prefix={PREFIX}",
    )
    assert r.status == "ok", r.problems()
    (lv,) = r.levels
    assert lv.prompt["tokens"] == 4 * (PREFIX + SUFFIX)
    # SGLang puts prompt_tokens_details.cached_tokens in usage only with --enable-cache-report
    assert lv.prompt["cached_tokens"] is None and lv.prompt["requests_reporting_cache"] == 0
    assert r.config["server_metrics"].startswith("not asked")
