"""Diagnosis to the source line: Python frames of
stack-carrying traces, joined with probe findings and patches.

Real inputs: the SGLang 0.5.23 CPU server's traces of one workload with and without stacks
(tests/data/traces/sglang-cpu-{stack,nostack}-TP-0, benchmarks/bench_trace_stack.py capture), real probe runs
over the real release trees, the repo's real patches. The one hand-made trace (a GPU kernel launched inside a
frame) stands in for a GPU stack trace, which no machine here can take; its frame names follow torch's format
and the real tree's line numbers, and it is named as hand-made.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import inv_cmd

from sglops.core.hosts import Host
from sglops.core.remote import LocalRemote
from sglops.patch.names import parse as parse_python
from sglops.trace import sources as src
from sglops.trace.analysis import analyze
from sglops.trace.stacks import package_path, parse_frame

DATA = Path(__file__).parent / "data" / "traces"
STACK = DATA / "sglang-cpu-stack-TP-0.trace.json.gz"
NOSTACK = DATA / "sglang-cpu-nostack-TP-0.trace.json.gz"


def _events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _reference_by_source(events: list[dict]) -> dict[tuple[str, str], float]:
    """(innermost SGLang frame else innermost file frame, op) -> self time, the slow obvious way: for every
    aten op, the enclosing ops and frames on its thread by interval containment (numpy over all of them)."""
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    frames = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "python_function" and not e["name"].startswith("<built-in")
    ]
    o_ts = np.array([e["ts"] for e in ops])
    o_end = o_ts + np.array([e.get("dur", 0.0) for e in ops])
    o_th = np.array([hash((e["pid"], e["tid"])) for e in ops])
    f_ts = np.array([e["ts"] for e in frames])
    f_end = f_ts + np.array([e.get("dur", 0.0) for e in frames])
    f_th = np.array([hash((e["pid"], e["tid"])) for e in frames])
    f_sg = np.array([bool((f := parse_frame(e["name"])) and f.sglang) for e in frames])
    eps = 0.005
    child = np.zeros(len(ops))
    # direct parent: the enclosing op that starts last (longest first at a tie)
    for i in range(len(ops)):
        enc = (o_th == o_th[i]) & (o_ts <= o_ts[i] + eps) & (o_end >= o_end[i] - eps)
        enc[i] = False
        if enc.any():
            cand = np.flatnonzero(enc)
            p = cand[np.lexsort((-(o_end[cand] - o_ts[cand]), o_ts[cand]))[-1]]
            child[p] += o_end[i] - o_ts[i]
    out: dict[tuple[str, str], float] = {}
    for i, e in enumerate(ops):
        if e["cat"] != "cpu_op":
            continue
        enc = (f_th == o_th[i]) & (f_ts <= o_ts[i]) & (f_end >= o_ts[i])
        sg = enc & f_sg
        pick = sg if sg.any() else enc
        name = (
            frames[int(np.flatnonzero(pick)[np.argmax(f_ts[pick])])]["name"]
            if pick.any()
            else "(no Python frame)"
        )
        key = (name, e["name"])
        out[key] = out.get(key, 0.0) + (o_end[i] - o_ts[i]) - child[i]
    return out


def test_cpu_source_lines_match_a_brute_force_reference():
    a = analyze([STACK])
    assert a.frames > 1000 and not a.has_gpu
    ref = _reference_by_source(_events(STACK))
    got = a.source_pairs
    assert set(got) == set(ref)
    worst = max(abs(got[k] - ref[k]) for k in ref)
    # us: float sums in a different order
    assert worst < 0.05, worst
    # the top rows are those pairs, biggest first, each an SGLang frame with its file and function
    top = sorted(ref.items(), key=lambda kv: -kv[1])[: len(a.sources)]
    assert [(r["frame"], r["what"]) for r in a.sources] == [k for k, _ in top]
    first = a.sources[0]
    assert first["source"]["sglang"] and first["label"].startswith(
        first["source"]["file"].rsplit("/", 1)[-1] + ":"
    )
    assert abs(first["share"] - first["us"] / a.cpu.self_total_us) < 1e-12


def test_frame_lines_are_the_functions_first_lines_in_the_real_tree():
    """torch names a frame entered while profiling by its function's first line: every SGLang frame of the top
    rows points at a `def` (or its decorator) of that name in the server's own sglang 0.5.23 tree."""
    from sglops.sandbox.trees import sglang_template

    pkg = sglang_template("0.5.23") / "python" / "sglang"
    a = analyze([STACK])
    for r in a.sources:
        f = parse_frame(r["frame"])
        tree = parse_python((pkg / package_path(f.file)).read_text())
        starts = {
            min([n.lineno, *[d.lineno for d in n.decorator_list]])
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == f.func
        }
        assert f.line in starts, (r["frame"], sorted(starts))


def test_a_trace_without_stacks_says_how_to_get_them():
    a = analyze([NOSTACK])
    assert a.frames == 0 and a.sources == [] and a.source_pairs == {}
    from sglops.views.trace import markdown

    assert "inv profile --stack" in markdown(a)
    # the same workload: the stack trace has the no-stack one's scheduler phases, and is the bigger file
    b = analyze([STACK])
    assert {p for p in a.cpu.phases} <= {p for p in b.cpu.phases}
    assert STACK.stat().st_size > 3 * NOSTACK.stat().st_size


def _probe_doc(root: Path, probes: Path | None = None) -> dict:
    from sglops.probe.scan import scan
    from sglops.probe.spec import load_probe_set

    remote = LocalRemote(Host(name="local", address="local", python=sys.executable, sglang_root=str(root)))
    return scan(remote, load_probe_set(str(probes) if probes else None), engine="python").to_json()


def _def_line(path: Path, func: str) -> int:
    tree = parse_python(path.read_text())
    return min(
        min([n.lineno, *[d.lineno for d in n.decorator_list]])
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == func
    )


def _gpu_trace(path: Path, frame: str, launch: str = "cudaLaunchKernel") -> Path:
    """HAND-MADE (no GPU here takes a stack trace): a decode step whose cast kernel is launched inside `frame`
    (through a torch frame and a dropped built-in one), and a small kernel launched outside any frame."""
    X = "X"
    ev = [
        {
            "ph": X,
            "cat": "user_annotation",
            "name": "step[DECODE bs=1]",
            "pid": 1,
            "tid": 1,
            "ts": 0.0,
            "dur": 300.0,
        },
        {"ph": X, "cat": "python_function", "name": frame, "pid": 1, "tid": 1, "ts": 1.0, "dur": 100.0},
        {
            "ph": X,
            "cat": "python_function",
            "name": "torch/nn/modules/module.py(1787): _call_impl",
            "pid": 1,
            "tid": 1,
            "ts": 5.0,
            "dur": 90.0,
        },
        {
            "ph": X,
            "cat": "python_function",
            "name": "<built-in method to of Tensor object at 0x7f>",
            "pid": 1,
            "tid": 1,
            "ts": 10.0,
            "dur": 70.0,
        },
        {"ph": X, "cat": "cpu_op", "name": "aten::to", "pid": 1, "tid": 1, "ts": 11.0, "dur": 60.0},
        {"ph": X, "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 20.0, "dur": 40.0},
        {
            "ph": X,
            "cat": "cuda_runtime",
            "name": launch,
            "pid": 1,
            "tid": 1,
            "ts": 30.0,
            "dur": 2.0,
            "args": {"correlation": 7},
        },
        {"ph": X, "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 150.0, "dur": 20.0},
        {
            "ph": X,
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 155.0,
            "dur": 2.0,
            "args": {"correlation": 8},
        },
        {
            "ph": X,
            "cat": "kernel",
            "name": (
                "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
                "at::TensorIteratorBase&)::{lambda()#3}::operator()()"
                " const::{lambda(c10::BFloat16)#1}>(int)"
            ),
            "pid": 0,
            "tid": 7,
            "ts": 200.0,
            "dur": 900.0,
            "args": {"correlation": 7, "device": 0},
        },
        {
            "ph": X,
            "cat": "kernel",
            "name": "nvjet_gemm",
            "pid": 0,
            "tid": 7,
            "ts": 1200.0,
            "dur": 100.0,
            "args": {"correlation": 8, "device": 0},
        },
    ]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_gpu_kernel_to_probe_finding_to_patch(tmp_path):
    """The whole join on the real 0.5.23 release tree: the probe's whole-pool-cast hit in forward_decode, the
    repo's gather-cast patch (its checks declare that line absent), a kernel launched in forward_decode."""
    from sglops.sandbox.trees import sglang_template

    root = sglang_template("0.5.23") / "python"
    doc = _probe_doc(root)
    probe_json = tmp_path / "probe.json"
    probe_json.write_text(json.dumps(doc))
    backend = root / "sglang" / "srt" / "layers" / "attention" / "flashinfer_mla_backend.py"
    line = _def_line(backend, "forward_decode")
    cast = [
        h
        for p in doc["probes"]
        if p["id"] == "whole_pool_cast"
        for h in p["hits"]
        if h["func"] == "forward_decode" and h["file"].endswith("/flashinfer_mla_backend.py")
    ]
    assert cast, "the probe finds the whole-pool cast in forward_decode"
    frame = f"sglang/srt/layers/attention/flashinfer_mla_backend.py({line}): forward_decode"
    a = analyze([_gpu_trace(tmp_path / "t.json", frame)], probe=src.load(probe_json))
    # the built-in frame is dropped
    assert a.has_gpu and a.frames == 2
    top = a.sources[0]
    assert top["frame"] == frame and top["share"] == pytest.approx(0.9)
    assert [h["line"] for h in top["probe"] if h["probe"] == "whole_pool_cast"] == [h["line"] for h in cast]
    assert top["patches"] == ["gather-cast"]
    assert a.sources[1]["frame"] == "(no Python frame)" and not a.sources[1]["probe"]
    (line_out,) = a.source_verdict()
    assert line_out.startswith("90.0% of GPU time in decode steps in unrolled_elementwise_kernel")
    assert f"flashinfer_mla_backend.py:{line} (forward_decode)" in line_out
    assert f"L{cast[0]['line']})" in line_out and line_out.endswith("-> inv apply-patch gather-cast")


def test_the_join_needs_the_same_file_and_function(tmp_path):
    """A frame in another function of the same file, or a
    patch root without the declaration: no flag, no patch."""
    from sglops.sandbox.trees import sglang_template

    root = sglang_template("0.5.23") / "python"
    probe_json = tmp_path / "probe.json"
    doc = _probe_doc(root)
    probe_json.write_text(json.dumps(doc))
    backend = root / "sglang" / "srt" / "layers" / "attention" / "flashinfer_mla_backend.py"
    rel = "srt/layers/attention/flashinfer_mla_backend.py"
    hit_funcs = {h["func"] for p in doc["probes"] for h in p["hits"] if h["file"].endswith(rel)}
    quiet = next(
        n.name
        for n in ast.walk(parse_python(backend.read_text()))
        if isinstance(n, ast.FunctionDef) and n.name not in hit_funcs
    )
    other = f"sglang/{rel}({_def_line(backend, quiet)}): {quiet}"
    a = analyze([_gpu_trace(tmp_path / "t.json", other)], probe=src.load(probe_json))
    assert a.sources[0]["frame"] == other and a.sources[0]["probe"] == [] and a.source_verdict() == []
    # hits, but none a patch removes
    init = f"sglang/{rel}({_def_line(backend, '__init__')}): __init__"
    c = analyze([_gpu_trace(tmp_path / "t1.json", init)], probe=src.load(probe_json))
    assert c.sources[0]["probe"] and {(h["file"], h["func"]) for h in c.sources[0]["probe"]} == {
        (rel, "__init__")
    }
    assert c.sources[0]["patches"] == [] and "apply-patch" not in c.source_verdict()[0]
    frame = (
        f"sglang/srt/layers/attention/flashinfer_mla_backend.py({_def_line(backend, 'forward_decode')}):"
        " forward_decode"
    )
    empty = tmp_path / "patches"
    empty.mkdir()
    os.environ["SGLOPS_PATCHES"] = str(empty)
    try:
        b = analyze([_gpu_trace(tmp_path / "t2.json", frame)], probe=src.load(probe_json))
    finally:
        del os.environ["SGLOPS_PATCHES"]
    assert (
        b.sources[0]["probe"] and b.sources[0]["patches"] == [] and "apply-patch" not in b.source_verdict()[0]
    )


@pytest.fixture(scope="module")
def cpu_tree():
    from sglops.sandbox import sglang_cpu

    if sglang_cpu.not_ready():
        pytest.skip(f"the real SGLang CPU environment is not built: {sglang_cpu.not_ready()}")
    return sglang_cpu.site_packages() / "sglang"


def test_cli_on_the_real_cpu_trace_with_a_real_probe_run(tmp_path, cpu_tree):
    """`inv probe-backends` over the CPU server's own tree with a probe set that flags torch_native's SDPA
    call, a patch that declares that call absent, then `inv analyze-trace --probe RUN`: the decode attention
    line is named with the finding and the patch."""
    probes = tmp_path / "probes.yaml"
    base = (Path(__file__).parent.parent / "playbooks" / "probes.yaml").read_text().split("\nprobes:")[0]
    probes.write_text(
        base
        + "\nprobes:\n  - id: sdpa_call\n    scope: backend\n    regex: 'scaled_dot_product_attention\\('\n"
        "    fact: sdpa\n    hit: calls torch SDPA per request\n    miss: no SDPA call\n"
    )
    patches = tmp_path / "patches" / "batched-sdpa"
    patches.mkdir(parents=True)
    (patches / "patch.yaml").write_text(
        "description: test patch\nfiles:\n  - python/sglang/srt/layers/attention/torch_native_backend.py\n"
        "variants: []\nchecks:\n  - file: python/sglang/srt/layers/attention/torch_native_backend.py\n"
        '    absent: "scaled_dot_product_attention("\n'
    )
    env = {"SGLOPS_ARTIFACTS": str(tmp_path / "art"), "SGLOPS_PATCHES": str(tmp_path / "patches")}
    r = inv_cmd(
        "probe-backends",
        "--host",
        "local",
        "--sglang-root",
        str(cpu_tree),
        "--probes",
        str(probes),
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (kept,) = (tmp_path / "art" / "local").glob("*/probe.json")
    run = kept.parent.name
    r = inv_cmd("analyze-trace", str(STACK), "--probe", run, "--json", "--out", str(tmp_path / "o"), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)["stacks"]
    flagged = [row for row in doc["top"] if row["probe"]]
    assert flagged and all(row["source"]["func"].startswith("_run_sdpa_forward") for row in flagged)
    assert any(
        v.endswith("-> inv apply-patch batched-sdpa") and "_run_sdpa_forward_decode" in v
        for v in doc["verdict"]
    )
    assert doc["probe"].endswith("probe.json")
    # the table view
    r = inv_cmd("analyze-trace", str(STACK), "--out", str(tmp_path / "o2"), env=env)
    # no probe: no join
    assert r.returncode == 0 and "source lines" in r.stdout and "batched-sdpa" not in r.stdout
    r = inv_cmd("analyze-trace", str(STACK), "--probe", str(tmp_path / "nowhere"), env=env)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--probe" in r.stderr


def test_diff_trace_per_source_function():
    """Two real CPU stack traces of one workload: per-function rows, each side summing to its own pairs."""
    from sglops.trace.diff import diff

    a, b = analyze([STACK]), analyze([STACK])
    d = diff(a, b)
    assert d.sources and all(x.delta_us == 0 for x in d.sources)
    per = len(a.cpu.iterations)
    assert sum(x.a_us for x in d.sources) == pytest.approx(sum(a.source_pairs.values()) / per)
    assert d.sources[0].detail.startswith(d.sources[0].name.rsplit(" (", 1)[0].rsplit("/", 1)[-1] + ":")
    # one side without stacks: no rows
    assert diff(analyze([NOSTACK]), b).sources == []


def test_profile_takes_stack_flag_and_keeps_with_stack():
    from sglops.trace.ops import OPS

    (prof,) = [o for o in OPS if o.name == "profile"]
    names = [p.name for p in prof.params if hasattr(p, "name")]
    assert "stack" in names and "with_stack" in names and "probe" in names


def test_a_cuda_graph_replay_is_named_and_not_joined(tmp_path):
    """Kernels a cudaGraphLaunch replayed were captured by another line: the row says so, no probe finding is
    joined to the replaying frame, and the verdict says how to see the capturing line."""
    from sglops.sandbox.trees import sglang_template

    root = sglang_template("0.5.23") / "python"
    probe_json = tmp_path / "probe.json"
    probe_json.write_text(json.dumps(_probe_doc(root)))
    backend = root / "sglang" / "srt" / "layers" / "attention" / "flashinfer_mla_backend.py"
    frame = (
        f"sglang/srt/layers/attention/flashinfer_mla_backend.py({_def_line(backend, 'forward_decode')}):"
        " forward_decode"
    )
    a = analyze(
        [_gpu_trace(tmp_path / "g.json", frame, launch="cudaGraphLaunch")], probe=src.load(probe_json)
    )
    top = a.sources[0]
    assert top["graph"] and top["label"].endswith("(forward_decode) [CUDA graph replay]")
    assert top["probe"] == [] and top["patches"] == []
    (line,) = a.source_verdict()
    assert "replayed from a CUDA graph" in line and "cuda_graph: {disable: true}" in line


def test_a_cast_finding_explains_the_cast_kernel_not_the_attention_kernel_beside_it(tmp_path):
    """The H200 stack trace: forward_decode launched both the whole-pool cast and FlashInfer's MLA kernel, and
    a frame carries only its function's first line, so both sit at flashinfer_mla_backend.py:616. The probe's
    cast finding (L660, `.to(...)`) names the copy kernel only; the attention kernel gets no probe tag and no
    patch."""
    from sglops.sandbox.trees import sglang_template

    root = sglang_template("0.5.23") / "python"
    probe_json = tmp_path / "probe.json"
    probe_json.write_text(json.dumps(_probe_doc(root)))
    backend = root / "sglang" / "srt" / "layers" / "attention" / "flashinfer_mla_backend.py"
    frame = (
        f"sglang/srt/layers/attention/flashinfer_mla_backend.py({_def_line(backend, 'forward_decode')}):"
        " forward_decode"
    )
    path = _gpu_trace(tmp_path / "t.json", frame)
    doc = json.loads(path.read_text())
    doc["traceEvents"] += [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "flashinfer::mla_run",
            "pid": 1,
            "tid": 1,
            "ts": 85.0,
            "dur": 5.0,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 86.0,
            "dur": 2.0,
            "args": {"correlation": 9},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "flashinfer::BatchMLAPageAttentionHopperKernel",
            "pid": 0,
            "tid": 7,
            "ts": 1110.0,
            "dur": 50.0,
            "args": {"correlation": 9, "device": 0},
        },
    ]
    path.write_text(json.dumps(doc))
    a = analyze([path], probe=src.load(probe_json))
    by_kernel = {s["what"]: s for s in a.sources}
    attention = by_kernel["flashinfer::BatchMLAPageAttentionHopperKernel"]
    cast = next(s for w, s in by_kernel.items() if "direct_copy" in w)
    assert attention["frame"] == cast["frame"] == frame
    assert any(h["probe"] == "whole_pool_cast" for h in cast["probe"]) and cast["patches"] == ["gather-cast"]
    assert not any(h["probe"] == "whole_pool_cast" for h in attention["probe"]) and attention["patches"] == []
    assert len(a.source_verdict()) == 1
