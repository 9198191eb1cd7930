"""The CPU side of trace analysis, on real SGLang 0.5.23 CPU
traces (tests/data/traces/README.md) and on GPU traces."""

from __future__ import annotations

import gzip
import json
import statistics

import pytest
from conftest import REPO, inv_cmd

from sglops.trace.analysis import analyze
from sglops.views import trace as trace_views
from sglops.views.show import render

TRACES = REPO / "tests" / "data" / "traces"
CPU20 = TRACES / "sglang-cpu-decode20-TP-0.trace.json.gz"
DECODE = TRACES / "sglang-cpu-bystage-TP-0-DECODE.trace.json.gz"
EXTEND = TRACES / "sglang-cpu-bystage-TP-0-EXTEND.trace.json.gz"
GRAPH = TRACES / "h200_graph_fullcast.trace.json.gz"


def _events(path):
    return [
        e
        for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
    ]


def _naive_self_us(events) -> tuple[dict[str, float], float]:
    """Self time the slow, obvious way: an op's duration minus that of every op directly inside it.
    Also the time the outermost ops cover."""
    evs = sorted(events, key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    out: dict[str, float] = {}
    outer = 0.0
    inner_ids: set[int] = set()
    for i, e in enumerate(evs):
        end = e["ts"] + e["dur"]
        inside = []
        for c in evs[i + 1 :]:
            if c["tid"] != e["tid"] or c["ts"] >= end:
                break
            if c["ts"] + c["dur"] <= end + 0.005:
                inside.append(c)
        inner_ids.update(id(c) for c in inside)
        direct = [
            c
            for c in inside
            if not any(
                o is not c and o["ts"] <= c["ts"] and o["ts"] + o["dur"] >= c["ts"] + c["dur"] - 0.005
                for o in inside
            )
        ]
        out[e["name"]] = out.get(e["name"], 0.0) + e["dur"] - sum(c["dur"] for c in direct)
    outer = sum(e["dur"] for e in evs if id(e) not in inner_ids)
    return out, outer


def test_cpu_only_trace_is_analysed_not_refused():
    a = analyze([CPU20])
    assert not a.has_gpu and a.gpu_us == 0 and a.findings == []
    assert any("CPU-only trace" in w for w in a.warnings)
    cpu = a.cpu
    kinds = {r["kind"]: r for r in cpu.step_types()}
    assert kinds["DECODE"]["count"] == 19 and kinds["EXTEND"]["count"] == 1
    raw_steps = [e for e in _events(CPU20) if e["name"] == "step[DECODE bs=1]"]
    assert kinds["DECODE"]["median_step_us"] == pytest.approx(statistics.median(e["dur"] for e in raw_steps))
    # each loop pass holds its step: run_batch >= the step it runs, the pass >= its run_batch
    decode = kinds["DECODE"]
    assert (
        decode["median_pass_us"]
        >= decode["median_phase_us"]["scheduler.run_batch"]
        >= decode["median_step_us"]
    )
    for phase in (
        "scheduler.recv_requests",
        "scheduler.get_next_batch_to_run",
        "scheduler.run_batch",
        "scheduler.process_batch_result",
        "copy_result_to_cpu",
        "scheduler.idle",
    ):
        assert phase in cpu.phases, phase
    recv = [e for e in _events(CPU20) if e["name"] == "scheduler.recv_requests"]
    assert len(cpu.iterations) == len(recv) and cpu.phases["scheduler.recv_requests"][1] == len(recv)
    top = [n for n, *_, ann in cpu.top_self(5) if not ann]
    assert top[0] == "aten::mm"
    assert cpu.verdict()[0].startswith("decode step: median ") and "(19 steps)" in cpu.verdict()[0]


def test_self_time_matches_the_obvious_computation():
    """On the real per-stage DECODE trace (3.6K ops): every op's self time, against an O(n^2) reference."""
    want, outer = _naive_self_us(_events(DECODE))
    cpu = analyze([DECODE]).cpu
    got = cpu.by_self
    assert set(got) == set(want)
    for name, us in want.items():
        assert got[name][0] == pytest.approx(us, rel=1e-6, abs=0.01), name
    # self times add up to what the outermost ops cover
    assert cpu.self_total_us == pytest.approx(outer, rel=1e-6)


def test_per_stage_files_by_profile_by_stage():
    """SGLang's CI naming: one file per stage, both analysed together, the stage read from the name."""
    a = analyze([DECODE, EXTEND])
    assert sorted((f.rank, f.stage) for f in a.files) == [(0, "DECODE"), (0, "EXTEND")]
    kinds = {r["kind"]: r["count"] for r in a.cpu.step_types()}
    assert kinds["DECODE"] == 5 and kinds["EXTEND"] == 1
    assert any(s["name"] == "step[EXTEND bs=1 toks=1]" for s in a.steps)


def _tiny(tmp_path, events, name="t-TP-0.trace.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_cpu_phases_inside_gpu_idle_gaps(tmp_path):
    """Kernels 0-10 and 30-40 us: a 20 us gap. On the launching thread, get_next_batch_to_run covers 12-28
    (16 us of the gap, 6 of them in an aten op inside it) and the next launch's aten::mm 29-30; the other
    3 us have no op at all; another thread's op does not count."""

    def x(cat, name, ts, dur, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    ev = [
        x("cpu_op", "aten::mm", 0, 2, correlation=1),
        x("cuda_runtime", "cudaLaunchKernel", 1, 1, correlation=1),
        x("kernel", "k1", 0, 10, tid=7, correlation=1, device=0),
        x("user_annotation", "scheduler.get_next_batch_to_run", 12, 16),
        x("cpu_op", "aten::index", 20, 6),
        x("cpu_op", "aten::mm", 29, 2),
        x("cuda_runtime", "cudaLaunchKernel", 29.5, 1, correlation=2),
        x("kernel", "k2", 30, 10, tid=7, correlation=2, device=0),
        x("cpu_op", "aten::other_thread", 10, 20, tid=2),
    ]
    a = analyze([_tiny(tmp_path, ev)])
    cpu = a.cpu
    assert cpu.gpu_idle_us == pytest.approx(20)
    assert cpu.idle_cpu_us == pytest.approx(17)
    assert cpu.idle_by_phase == {"scheduler.get_next_batch_to_run": pytest.approx(16)}
    assert dict(cpu.top_idle()) == {
        "scheduler.get_next_batch_to_run": pytest.approx(10),
        "aten::index": pytest.approx(6),
        "aten::mm": pytest.approx(1),
    }
    doc = a.to_json()["cpu"]["gpu_idle"]
    assert doc["by_op_self"][0] == {"name": "scheduler.get_next_batch_to_run", "us": 10.0, "share": 0.5}


def test_gpu_trace_gets_the_cpu_view_beside_the_kernels():
    """A real H200 CUDA-graph decode trace: the kernel view as before, plus the CPU during GPU gaps."""
    a = analyze([GRAPH])
    assert a.has_gpu and a.findings and a.cpu.gpu_idle_us == pytest.approx(a.idle_us)
    assert 0 < a.cpu.idle_cpu_us <= a.cpu.gpu_idle_us
    from rich.console import Console

    out = Console(record=True, width=200)
    out.print(render(a))
    text = out.export_text()
    assert (
        "GPU time by kernel" in text
        and "while the GPU idles" in text
        and "(no op on the launching thread)" in text
    )
    assert "## CPU side" in trace_views.markdown(a)


def test_inv_analyze_trace_draws_only_what_is_asked(tmp_path):
    r = inv_cmd("analyze-trace", str(CPU20), "--json", "--out", str(tmp_path / "j"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["gpu"] is False and doc["cpu"]["step_types"][0]["kind"] == "DECODE"
    assert sorted(p.name for p in (tmp_path / "j").iterdir()) == ["analysis.json"]
    r = inv_cmd("analyze-trace", str(CPU20), "--chart", "--out", str(tmp_path / "t"))
    assert r.returncode == 0, r.stderr
    assert "scheduler.run_batch" in r.stdout and "top CPU ops by self time" in r.stdout
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [
        "analysis.json",
        "report.md",
        "top_cpu_ops.png",
        "top_cpu_ops.svg",
    ]
    assert (tmp_path / "t" / "top_cpu_ops.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_cpu_only_trace_needs_neither_matplotlib_nor_numpy(tmp_path):
    """Start-up is most of analyze-trace's time on a small trace: no chart asked, no matplotlib; no GPU
    events, no numpy (the plain-Python CPU view above was checked against the same numbers)."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from sglops.trace.analysis import analyze_to; from sglops.views.files import draw; "
        "analyze_to(sys.argv[1], sys.argv[2], markdown=True, draw=draw); "
        "print('matplotlib' in sys.modules, 'numpy' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(CPU20), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False False"
