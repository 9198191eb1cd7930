"""Trace analysis on the real H200 trace (against torch's own key_averages) and on broken input."""

from __future__ import annotations

import gzip
import json
import sys

import pytest
from conftest import REPO, inv_cmd

from sglops.core.errors import ConfigError
from sglops.trace.analysis import analyze
from sglops.trace.breakdown import UNATTRIBUTED
from sglops.trace.diagnose import load_rules
from sglops.trace.parse import TraceError
from sglops.views.show import render

# real H200 traces, vendored: the suite needs nothing beside the repo
TRACES = REPO / "tests" / "data" / "traces"
# 60 layers, eager decode, torch 2.11.0+cu130
REAL = TRACES / "h200_decode_gathercast.trace.json.gz"
TORCH = TRACES / "h200_decode_gathercast.torch_totals.json"
TOLERANCE = 0.005

sys.path.insert(0, str(REPO / "sglops" / "sandbox"))
import standin_trace  # noqa: E402  (stdlib-only module the stand-in server imports the same way)


@pytest.fixture(scope="module")
def real():
    return analyze([REAL])


FULLCAST = REPO / "tests" / "data" / "traces" / "h200_decode_fullcast.trace.json.gz"
# 16-layer H200 traces from the kernel work (make_decode_trace.py)
SMALL = REPO / "tests" / "data" / "traces"
REAL_TRACES = [
    (REAL, TORCH, None),
    (FULLCAST, FULLCAST.with_name("h200_decode_fullcast.torch_totals.json"), None),
    (SMALL / "h200_fullcast_small.trace.json.gz", SMALL / "h200_decode_small.torch_totals.json", "fullcast"),
    (
        SMALL / "h200_gathercast_small.trace.json.gz",
        SMALL / "h200_decode_small.torch_totals.json",
        "gathercast",
    ),
]


def _torch_rows(totals, variant):
    """torch's top rows as (key, count, device us), from either ground-truth layout."""
    doc = json.loads(totals.read_text())
    if variant is None:
        return [
            (r["key"], r["count"], r["device_time_total_us"])
            for r in doc["torch_key_averages_top_by_device_time_us"]
        ]
    return [(k, c, us) for k, c, us, _ in doc["results"][variant]["top_device_time_us"]]


@pytest.mark.parametrize(
    "trace,totals,variant", REAL_TRACES, ids=["gathercast", "fullcast", "small-fullcast", "small-gathercast"]
)
def test_matches_torch_key_averages(trace, totals, variant):
    """Every row of torch's top-25 device totals, within 0.5%, with the same call counts.

    torch groups by (name, device type): kernels are device rows; ops and ProfilerStep* are
    CPU rows whose device time includes nested ops; a record_function range (layer_N) also
    has a device row, its span on the GPU stream, and that is the one in torch's top list.
    """
    a = analyze([trace])
    rows = _torch_rows(totals, variant)
    checked = {"kernel": 0, "op": 0, "gpu span": 0}
    kinds_of: dict[str, list[str]] = {}
    for key, want_count, want_us in rows:
        candidates = [
            (kind, table[key])
            for kind, table in (("kernel", a.by_kernel), ("gpu span", a.by_gpu_span), ("op", a.by_op))
            if key in table
        ]
        hit = [
            kind
            for kind, (us, count) in candidates
            if count == want_count and us == pytest.approx(want_us, rel=TOLERANCE)
        ]
        assert hit, (key, want_count, want_us, candidates)
        # a name torch lists twice (CPU row and device row of one record_function) matches both of ours
        kind = next((k for k in hit if k not in kinds_of.get(key, [])), None)
        assert kind, (key, "matched the same row twice")
        kinds_of.setdefault(key, []).append(kind)
        checked[kind] += 1
    assert checked["kernel"] and checked["op"], checked
    assert len(rows) == 25


@pytest.mark.parametrize(
    "trace", [FULLCAST, SMALL / "h200_fullcast_small.trace.json.gz"], ids=["60-layer", "16-layer"]
)
def test_real_whole_pool_cast_trace_is_diagnosed(trace):
    """Real H200 traces where every layer casts the whole FP8 pool: the cast is named first."""
    a = analyze([trace])
    first = a.findings[0]
    assert first.rule == "dtype-cast" and first.top_op == "aten::copy_"
    # torch's own tables: 254.6 of 288.5 ms, 41.6 of 46.8 ms
    assert 0.85 < first.share < 0.95
    assert first.message.startswith("dtype conversion (aten::copy_ -> elementwise kernel) takes")


def test_nested_op_semantics(real):
    # aten::matmul only wraps aten::mm: same device time; every kernel here runs inside a layer_N range
    assert real.by_op["aten::matmul"][0] == pytest.approx(real.by_op["aten::mm"][0])
    layers = sum(us for name, (us, _) in real.by_op.items() if name.startswith("layer_"))
    assert layers == pytest.approx(real.gpu_us, rel=1e-9)
    assert real.by_op["ProfilerStep*"][0] == pytest.approx(real.gpu_us, rel=1e-9)
    assert all(f.linked == f.kernels for f in real.files)


def test_steps_idle_and_verdict(real):
    steps = real.step_summary()
    assert [s["name"] for s in steps] == ["ProfilerStep#"] and steps[0]["count"] == 5
    assert sum(s["gpu_us"] for s in real.steps) == pytest.approx(real.gpu_us)
    # eager decode without CUDA graphs: 7 ms of GPU work in 23 ms steps
    assert 0.5 < real.idle_share < 0.9
    assert real.scope == "steps"
    assert real.findings[0].rule == "gemm" and "in profiled steps" in real.findings[0].message
    # this is the gather-cast (fixed) variant
    assert "dtype-cast" not in {f.rule for f in real.findings}


def test_plain_json_same_as_gzip(tmp_path, real):
    plain = tmp_path / "decode.trace.json"
    plain.write_bytes(gzip.decompress(REAL.read_bytes()))
    again = analyze([plain])
    assert again.by_kernel == real.by_kernel and again.by_op == real.by_op


def _standin(tmp_path, cast: bool, tp: int = 2, steps: int = 3):
    paths = []
    for rank in range(tp):
        p = tmp_path / f"{'fc' if cast else 'gc'}-1700-TP-{rank}.trace.json.gz"
        standin_trace.write_trace(str(p), rank=rank, tp_size=tp, steps=steps, whole_pool_cast=cast)
        paths.append(p)
    return paths


def test_whole_pool_cast_is_named_with_its_share(tmp_path):
    a = analyze(_standin(tmp_path, cast=True))
    first = a.findings[0]
    assert first.rule == "dtype-cast"
    assert first.share == pytest.approx(0.69, abs=0.02)
    assert (
        first.message
        == "dtype conversion (aten::copy_ -> elementwise kernel) takes 69% of GPU time in decode steps"
    )
    assert any("inv probe-backends" in t for t in first.try_next)
    assert any("gather-cast" in t for t in first.try_next)
    assert [f.rank for f in a.files] == [0, 1] and a.scope == "decode"
    assert a.gpu_us == pytest.approx(sum(f.gpu_us for f in a.files))
    fixed = analyze(_standin(tmp_path, cast=False))
    assert "dtype-cast" not in {f.rule for f in fixed.findings}
    assert fixed.step_summary()[0]["median_cpu_us"] < 0.7 * a.step_summary()[0]["median_cpu_us"]


def test_standin_is_deterministic_and_marked(tmp_path):
    a, b = tmp_path / "a.gz", tmp_path / "b.gz"
    for p in (a, b):
        standin_trace.write_trace(str(p), rank=1, tp_size=2, steps=2, whole_pool_cast=True)
    assert a.read_bytes() == b.read_bytes()
    doc = json.loads(gzip.decompress(a.read_bytes()))
    assert "sglops stand-in" in doc["traceName"] and doc["distributedInfo"]["rank"] == 1
    assert any(e.get("name") == "step[DECODE bs=1]" for e in doc["traceEvents"])
    assert not any(str(e.get("name", "")).startswith("ProfilerStep") for e in doc["traceEvents"])


def test_rank_from_metadata_when_name_has_none(tmp_path):
    p = tmp_path / "whatever.json.gz"
    standin_trace.write_trace(str(p), rank=3, tp_size=4, steps=1, whole_pool_cast=False)
    assert analyze([p]).files[0].rank == 3


def _tiny(tmp_path, events, name="tiny.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_external_id_fallback_and_unlinked_kernels(tmp_path):
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "outer",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
            "args": {"External id": 1},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "inner",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 20,
            "args": {"External id": 2},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 12,
            "dur": 3,
            "args": {"correlation": 7, "External id": 2},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k1",
            "pid": 0,
            "tid": 7,
            "ts": 20,
            "dur": 5,
            "args": {"correlation": 7, "External id": 2, "device": 0},
        },
        # launch event missing: linked through External id to `outer`
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k2",
            "pid": 0,
            "tid": 7,
            "ts": 30,
            "dur": 3,
            "args": {"correlation": 99, "External id": 1, "device": 0},
        },
        # nothing links this one (a CUDA-graph replay without CPU ops)
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k3",
            "pid": 0,
            "tid": 7,
            "ts": 40,
            "dur": 2,
            "args": {"correlation": 123, "device": 0},
        },
    ]
    a = analyze([_tiny(tmp_path, ev)])
    assert a.by_op["outer"] == [8.0, 1] and a.by_op["inner"] == [5.0, 1]
    assert a.gpu_us == 10.0 and a.window_us == 22.0 and a.idle_us == pytest.approx(12.0)
    assert any(UNATTRIBUTED in w for w in a.warnings)


def test_truncated_gzip_is_an_error_not_a_result(tmp_path):
    whole = REAL.read_bytes()
    cut = tmp_path / "cut-TP-0.trace.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceError) as err:
        analyze([cut])
    msg = str(err.value)
    assert str(cut) in msg and "events" in msg and "byte" in msg and "not analysed" in msg


def test_invalid_and_truncated_json(tmp_path):
    text = gzip.decompress(REAL.read_bytes())
    broken = tmp_path / "broken.json"
    broken.write_bytes(text[:200_000] + b"}}garbage" + text[200_000:])
    with pytest.raises(
        TraceError, match=r"broken\.json: invalid or truncated JSON after \d+ events, near byte"
    ):
        analyze([broken])
    short = tmp_path / "short.json"
    short.write_bytes(text[: len(text) - 100])
    with pytest.raises(TraceError, match=r"short\.json: invalid or truncated JSON"):
        analyze([short])
    other = tmp_path / "other.json"
    other.write_text('{"foo": [1, 2]}')
    with pytest.raises(TraceError, match="other.json: not a Chrome trace"):
        analyze([other])


def test_no_gpu_events_is_a_cpu_analysis_with_a_note(tmp_path):
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "args": {}}
    ]
    a = analyze([_tiny(tmp_path, ev)])
    assert not a.has_gpu and a.cpu.by_self == {"aten::mm": [10.0, 1, 10.0, 0]}
    assert any(w.startswith("CPU-only trace: no GPU activity recorded") for w in a.warnings)
    # no hint to turn on what the host does not have
    assert "GPU activity" not in " ".join(a.cpu.verdict())


def test_bad_rule_file_names_file_and_line(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - id: x\n    what: y\n    min_share: 0.1\n    kernel: '('\n")
    with pytest.raises(ConfigError, match=r"rules.yaml:2: bad regex"):
        load_rules(rules)
    rules.write_text("rules:\n  - id: x\n    what: y\n    min_share: 0.1\n    kernal: 'a'\n")
    with pytest.raises(ConfigError, match=r"rules.yaml:2: unknown field 'kernal'"):
        load_rules(rules)


def test_report_views(tmp_path, real):
    from sglops.trace.analysis import save_report
    from sglops.views.files import draw

    saved = save_report(real, tmp_path / "rep", chart=True, draw=draw)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Verdict" in md and "matrix multiplies (aten::mm)" in md
    assert open(saved["chart"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((tmp_path / "rep" / "analysis.json").read_text())
    assert doc["by_kernel"][0]["name"] == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_NNT"
    from rich.console import Console

    out = Console(record=True, width=200)
    out.print(render(real))
    # kernel names carry [...]: shown as text, not eaten as rich markup
    text = out.export_text()
    assert "unrolled_elementwise_kernel[direct_copy_kernel_cuda, BFloat16]" in text
    assert "ProfilerStep#" in text and "78.3%" in text


def test_inv_analyze_trace(tmp_path):
    r = inv_cmd("analyze-trace", str(REAL), "--json", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["findings"][0]["rule"] == "gemm" and (tmp_path / "o" / "analysis.json").exists()
    # --json draws nothing it was not asked for
    assert not (tmp_path / "o" / "report.md").exists()
    bad = tmp_path / "bad.trace.json.gz"
    bad.write_bytes(REAL.read_bytes()[:5000])
    r = inv_cmd("analyze-trace", str(bad))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "bad.trace.json.gz" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_fast_and_streaming_paths_agree(monkeypatch, real):
    """Kineto's layout takes the orjson batch path; anything else (or a broken file) the ijson one."""
    from sglops.trace import parse

    def no_slow(*a, **k):
        raise AssertionError("fell back to ijson on a well-formed Kineto trace")

    monkeypatch.setattr(parse, "_slow", no_slow)
    fast = analyze([REAL])
    monkeypatch.undo()

    def no_fast(*a, **k):
        raise parse._NotFast

    monkeypatch.setattr(parse, "_fast", no_fast)
    slow = analyze([REAL])
    assert fast.by_kernel == slow.by_kernel == real.by_kernel
    assert fast.by_op == slow.by_op and fast.steps == slow.steps


# benchmarks/gpu_graph_trace.py, H200
GRAPH = REPO / "tests" / "data" / "traces" / "h200_graph_fullcast.trace.json.gz"


def test_cuda_graph_replay_trace_matches_torch_and_is_still_diagnosed():
    """SGLang decodes under CUDA graphs: replayed kernels hang off cudaGraphLaunch, with no aten op.
    Kernel totals and the step[DECODE] span must still match torch's own, and the whole-pool cast must
    still be named, from the kernel alone."""
    a = analyze([GRAPH])
    rows = json.loads(GRAPH.with_name("h200_graph_fullcast.torch_totals.json").read_text())[
        "torch_key_averages_top_by_device_time_us"
    ]
    kernels = [r for r in rows if r["key"] in a.by_kernel]
    assert len(kernels) >= 10
    for r in kernels:
        us, count = a.by_kernel[r["key"]]
        assert count == r["count"] and us == pytest.approx(r["device_time_total_us"], rel=TOLERANCE), r
    step = next(r for r in rows if r["key"] == "step[DECODE bs=1]")
    assert a.by_gpu_span["step[DECODE bs=1]"][0] == pytest.approx(step["device_time_total_us"], rel=TOLERANCE)
    (first, *_) = a.to_json()["findings"]
    assert first["rule"] == "dtype-cast" and first["top_op"] == "CUDA graph replay"
    assert first["message"].startswith("dtype conversion (CUDA graph replay -> elementwise kernel) takes 9")
    assert "in decode steps" in first["message"]
