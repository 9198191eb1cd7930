"""The parser and analysis at scale: a trace made of many
copies of a real one is analysed as those copies are.

Why: the 1 GB goals (< 300 MB, < 20 s; benchmarks/bench_trace_stack.py big) rest on three shortcuts that must
not change a single figure: the orjson batches (the ijson path is the reference), the order each thread's
events come in (taken from the file when torch wrote it in order, checked; sorted otherwise), and 4-byte
External ids (widened when one does not fit). The traces here are the real SGLang 0.5.23 CPU traces and a real
H200 trace, replicated in tmp_path with shifted times and ids (as the benchmark does, smaller); nothing big is
kept.
"""

from __future__ import annotations

import json
import random
from array import array
from pathlib import Path

import pytest
from trace_replica import replicate

from sglops.trace import parse, stacks
from sglops.trace.analysis import TraceAnalysis, analyze

DATA = Path(__file__).parent / "data" / "traces"
STACK = DATA / "sglang-cpu-stack-TP-0.trace.json.gz"
NOSTACK = DATA / "sglang-cpu-nostack-TP-0.trace.json.gz"
GPU = DATA / "h200_gathercast_small.trace.json.gz"


def _payload(a: TraceAnalysis) -> dict:
    doc = a.to_json()
    for f in doc["files"]:
        f.pop("path")
    doc["source_pairs"] = sorted([*k, v] for k, v in a.source_pairs.items())
    doc["iterations"] = (
        [{k: v for k, v in it.items() if k != "rank"} for it in a.cpu.iterations] if a.cpu else None
    )
    return doc


def _close(a, b, path="") -> None:
    """Equal structure and counts; floats equal to 1e-9 relative (a different summation order only); rows by
    name in any order (rows of equal time keep the order their names first appear in, which a shuffle
    changes)."""
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-6), path
    elif isinstance(a, dict):
        assert sorted(a) == sorted(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        # rows of equal value: any order
        if a and all(isinstance(x, dict) and "name" in x for x in a + b):
            a, b = sorted(a, key=lambda r: r["name"]), sorted(b, key=lambda r: r["name"])
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


@pytest.mark.parametrize(
    "source,copies", [(STACK, 3), (NOSTACK, 8), (GPU, 4)], ids=["stack", "nostack", "gpu"]
)
def test_streamed_parse_of_a_generated_trace_is_the_reference_analysis(tmp_path, monkeypatch, source, copies):
    """The fast path (orjson batches, file order, numpy) gives exactly what the ijson path and Python's sorts
    give, and the copies add up: op counts, frames and steps are `copies` times the real trace's."""
    path = replicate(source, tmp_path / "big.trace.json", copies)
    # numpy and the file-order shortcut even at this size
    monkeypatch.setattr(stacks, "LARGE", 0)
    fast = _payload(analyze([path]))
    # Python's sorts: the order the shortcut must reproduce
    monkeypatch.setattr(stacks, "LARGE", 10**12)
    # ijson only
    monkeypatch.setattr(parse, "_fast", lambda *_: (_ for _ in ()).throw(parse._NotFast()))
    slow = _payload(analyze([path]))
    # exactly, floats included
    assert fast == slow
    one = analyze([source])
    assert fast["cpu"]["ops"] == copies * one.cpu.ops
    assert fast["stacks"]["frames"] == copies * one.frames
    assert len(fast["iterations"]) >= copies * len(one.cpu.iterations) - copies
    for row in one.cpu.top_self(10):
        got = next(r for r in fast["cpu"]["top_self"] if r["name"] == row[0])
        assert got["count"] == copies * row[2]
        assert got["self_us"] == pytest.approx(copies * row[1], rel=1e-6)


@pytest.mark.parametrize("source", [STACK, GPU], ids=["stack", "gpu"])
def test_a_file_out_of_order_is_sorted_and_analysed_the_same(tmp_path, monkeypatch, source):
    """Events in a random order: the per-thread order check fails and the lexsort runs; same analysis (to the
    last bits where only the summation order differs)."""
    monkeypatch.setattr(stacks, "LARGE", 0)
    in_order = _payload(analyze([replicate(source, tmp_path / "a.trace.json", 2)]))
    shuffled = _payload(analyze([replicate(source, tmp_path / "b.trace.json", 2, shuffle=True)]))
    _close(shuffled, in_order)


def test_thread_order_is_the_stable_sort():
    """thread_order against Python's stable sort: in order (the shortcut), out of order (lexsort), ties kept
    in file order, threads < 0 first."""
    rng = random.Random(3)
    ts = array("d", [float(rng.randrange(50)) for _ in range(3000)])
    dur = array("d", [float(rng.randrange(5)) for _ in range(3000)])
    th = array("i", [rng.randrange(-1, 4) for _ in range(3000)])
    want = sorted(range(3000), key=lambda i: (th[i], ts[i], -dur[i]))
    old = stacks.LARGE
    try:
        stacks.LARGE = 0
        # shuffled: the lexsort
        assert list(stacks.thread_order(ts, th, dur)) == want
        order = array("i", want)
        ts2, dur2, th2 = (array(a.typecode, (a[i] for i in order)) for a in (ts, dur, th))
        # in order: the file's own order, checked
        got = list(stacks.thread_order(ts2, th2, dur2))
        assert got == list(range(3000))
    finally:
        stacks.LARGE = old


def test_external_ids_take_four_bytes_until_one_needs_eight(tmp_path):
    """A CPU op's External id in 4 bytes (real traces stay far below 2**31); an id past it widens the column
    without losing a value, and the fallback link by External id still finds the op."""
    small = parse.read(replicate(NOSTACK, tmp_path / "a.trace.json", 1))
    assert small.o_ext.itemsize == 4
    wide = parse.read(replicate(GPU, tmp_path / "b.trace.json", 2, id_offset=2**33))
    assert wide.o_ext.itemsize == 8
    assert max(wide.o_ext) > 2**33
    base = parse.read(replicate(GPU, tmp_path / "c.trace.json", 2))
    assert [x - 2**33 if x > 2**32 else x for x in wide.o_ext] == list(base.o_ext)


def test_name_and_thread_ids_take_two_bytes_until_a_trace_has_more(tmp_path):
    """2-byte name ids for the few hundred names of a real trace; a trace with 40,000 op names (hostile, or a
    name per request) widens the column and every op keeps its own name."""
    assert parse.read(NOSTACK).o_name.itemsize == 2
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 1 + i % 3,
            "ts": float(i),
            "dur": 0.5,
            "args": {"External id": i},
        }
        for i in range(40_000)
    ]
    path = tmp_path / "many.trace.json"
    path.write_text(json.dumps({"traceEvents": events}).replace("}, {", "},\n{"))
    raw = parse.read(path)
    assert raw.o_name.itemsize == 4 and raw.o_thread.itemsize == 2
    assert [raw.names[k] for k in raw.o_name] == [f"op{i}" for i in range(40_000)]
    a = analyze([path])
    assert a.cpu.ops == 40_000 and a.cpu.by_self["op39999"][1] == 1
