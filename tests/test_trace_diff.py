"""`inv diff-trace`: two real profiles side by side, per step, kernel, launching op and CPU phase.

The H200 pair is the investigation itself (the same decode, whole-pool cast vs gather-cast); the CPU pair is
two real SGLang 0.5.23 CPU traces. Every side's totals must be exactly what the single-trace analysis reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import inv_cmd

from sglops.trace import analysis
from sglops.trace.diff import diff, diff_files

DATA = Path(__file__).resolve().parent / "data" / "traces"
FULL = str(DATA / "h200_fullcast_small.trace.json.gz")
GATHER = str(DATA / "h200_gathercast_small.trace.json.gz")
CPU_A = str(DATA / "sglang-cpu-bystage-TP-0-DECODE.trace.json.gz")
CPU_B = str(DATA / "sglang-cpu-decode20-TP-0.trace.json.gz")


@pytest.fixture(scope="module")
def h200():
    a, b = analysis.analyze([FULL]), analysis.analyze([GATHER])
    return a, b, diff(a, b, labels=("whole-pool cast", "gather-cast"))


def test_the_cast_that_went_away_leads_the_diff(h200):
    _, _, d = h200
    top = d.kernels[0]
    assert "unrolled_elementwise_kernel" in top.name and top.detail == "aten::copy_"
    # ~13.7 ms a step on this 3-step trace
    assert top.delta_us < -10_000
    assert d.ops[0].name == "aten::copy_" and d.ops[0].delta_us == pytest.approx(top.delta_us, rel=0.01)
    head = d.headline()
    assert head.startswith("ProfilerStep# GPU time 15.6 -> 1.80 ms: -13.7 ms ")
    assert "(aten::copy_)" in head


def test_each_side_adds_up_to_its_own_analysis(h200):
    a, b, d = h200
    assert d.unit == "per step" and d.a.steps == d.b.steps == 3
    assert sum(r.a_us for r in d.kernels) * d.a.steps == pytest.approx(a.scope_gpu_us, rel=1e-9)
    assert sum(r.b_us for r in d.kernels) * d.b.steps == pytest.approx(b.scope_gpu_us, rel=1e-9)
    assert sum(r.a_us for r in d.ops) * d.a.steps == pytest.approx(a.scope_gpu_us, rel=1e-9)
    steps = {r.name: r for r in d.steps}
    assert steps["ProfilerStep#"].a_us == a.step_summary()[0]["median_gpu_us"]


def test_rows_are_ranked_by_absolute_change(h200):
    _, _, d = h200
    for rows in (d.kernels, d.ops, d.cpu_ops):
        changes = [abs(r.delta_us) for r in rows]
        assert changes == sorted(changes, reverse=True)


def test_a_trace_against_itself_changes_nothing():
    d = diff_files([FULL], [FULL])
    assert all(r.delta_us == 0 for rows in (d.steps, d.kernels, d.ops, d.phases, d.cpu_ops) for r in rows)
    assert d.kernels and d.steps


def test_cpu_only_traces_diff_by_step_phase_and_op():
    a, b = analysis.analyze([CPU_A]), analysis.analyze([CPU_B])
    d = diff(a, b)
    assert not d.kernels and d.a.step_kind == d.b.step_kind == "DECODE"
    assert d.headline().startswith("step[DECODE bs=1] CPU time ")
    phases = {r.name: r for r in d.phases}
    assert "scheduler.run_batch" in phases
    decode = [it for it in b.cpu.iterations if it["kind"] == "DECODE"]
    want = sum(it["phases"].get("scheduler.run_batch", 0.0) for it in decode) / len(decode)
    assert phases["scheduler.run_batch"].b_us == pytest.approx(want)
    assert {r.name for r in d.cpu_ops} >= {"aten::mm"}


def test_inv_diff_trace_json_and_bad_input(tmp_path):
    res = inv_cmd("diff-trace", FULL, GATHER, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["unit"] == "per step" and "unrolled_elementwise_kernel" in doc["kernels"][0]["name"]
    assert doc["a"]["label"] == "h200_fullcast_small"
    res = inv_cmd("diff-trace", FULL, str(tmp_path / "missing.trace.json.gz"))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_two_profiles_of_two_ranks_are_diffed_rank_by_rank():
    """TP=2 on one host against the same TP=2 over two nodes (real SGLang 0.5.23 CPU traces): the sum says the
    decode step got slower; each rank's row says where: rank 1's own work grew, rank 0 only waited longer in
    the all-reduce for it."""
    tp2 = [str(DATA / f"sglang-cpu-tp2-TP-{r}.trace.json.gz") for r in (0, 1)]
    two_nodes = [str(DATA / f"sglang-cpu-2node-TP-{r}.trace.json.gz") for r in (0, 1)]
    d = diff_files(tp2, two_nodes, labels=("one host", "two nodes"))
    assert [r["rank"] for r in d.ranks] == [0, 1]
    by = {r["rank"]: r for r in d.ranks}
    own0, own1 = by[0]["own_us"], by[1]["own_us"]
    # rank 1's own work: +35.6 ms
    assert own1[1] - own1[0] > 20_000 and abs(own0[1] - own0[0]) < 5_000
    # rank 0 waits for it
    assert by[0]["collective_us"][1] > by[0]["collective_us"][0] + 50_000
    assert (
        by[0]["headline"].startswith("step[DECODE bs=1] CPU time") and "gloo:all_reduce" in by[0]["headline"]
    )
    # each row is that rank's own diff: the same as diffing its files alone
    for rank in (0, 1):
        alone = diff_files([tp2[rank]], [two_nodes[rank]], labels=("one host", "two nodes"))
        assert alone.ranks == [] and by[rank]["headline"] == alone.headline()
    # one rank a side: nothing per rank
    assert diff_files(tp2[:1], two_nodes[:1]).ranks == []


def test_inv_diff_trace_shows_each_rank(tmp_path):
    a = ",".join(str(DATA / f"sglang-cpu-tp2-TP-{r}.trace.json.gz") for r in (0, 1))
    b = ",".join(str(DATA / f"sglang-cpu-2node-TP-{r}.trace.json.gz") for r in (0, 1))
    r = inv_cmd("diff-trace", a, b, "--json")
    assert r.returncode == 0, r.stderr
    assert [x["rank"] for x in json.loads(r.stdout)["ranks"]] == [0, 1]
    r = inv_cmd("diff-trace", a, b, "--top", "2", env={"COLUMNS": "200"})
    assert r.returncode == 0 and "per rank: A: traces -> B: traces" in r.stdout, r.stdout[-2000:]
