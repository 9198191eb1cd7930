"""The parallel reader gives the sequential reader's RawTrace and analysis.json, byte for byte.

Why: the 1 GB speed goal reads plain traces in worker processes (sglops/trace/parallel_read.py); every figure
must stay what the sequential reader gives. The traces are the real ones under tests/data/traces/ (gunzipped
to plain JSON in tmp_path) and replicas of them, read with small ranges so that every file splits into many.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from trace_replica import replicate

from sglops.trace import parallel_read, parse
from sglops.trace.analysis import analyze
from sglops.trace.parse import RawTrace, TraceError

DATA = Path(__file__).parent / "data" / "traces"
TRACES = sorted(DATA.glob("*.trace.json.gz"))


def _plain(src: Path, tmp_path: Path) -> Path:
    out = tmp_path / src.name[:-3]
    out.write_bytes(gzip.decompress(src.read_bytes()))
    return out


def _columns(raw: RawTrace) -> dict:
    cols = {c: (getattr(raw, c).typecode, getattr(raw, c).tobytes()) for c in parse.COLUMNS}
    return {**cols, "names": raw.names, "events": raw.events, "meta": raw.meta}


def _sequential(path: Path, monkeypatch) -> RawTrace:
    with monkeypatch.context() as m:
        m.setenv(parallel_read.WORKERS_ENV, "1")
        return parse.read(path)


def _parallel(path: Path, range_bytes: int) -> RawTrace:
    """The parallel reader alone (no sequential fallback): raises if it cannot vouch for the file."""
    return parse.read_parallel(path, range_bytes=range_bytes, n=2)


def _analysis(path: Path) -> bytes:
    doc = analyze([path]).to_json()
    return json.dumps(doc, sort_keys=True).encode()


@pytest.mark.parametrize("src", TRACES, ids=lambda p: p.name.split(".")[0])
def test_every_test_trace_reads_identically(src: Path, tmp_path: Path, monkeypatch) -> None:
    plain = _plain(src, tmp_path)
    spans = parallel_read.ranges(str(plain), parse._head, 32 << 10)[1]
    # the file really splits
    assert len(spans) > 1 or plain.stat().st_size < 64 << 10
    seq = _sequential(plain, monkeypatch)
    par = _parallel(plain, 32 << 10)
    assert _columns(par) == _columns(seq)
    seq_doc = _analysis_with(plain, monkeypatch, parallel=False)
    par_doc = _analysis_with(plain, monkeypatch, parallel=True)
    assert par_doc == seq_doc


def _analysis_with(path: Path, monkeypatch, parallel: bool) -> bytes:
    """analysis.json's content through parse.read, the parallel path forced (and checked taken) or barred."""
    taken = []
    real = parallel_read.read_into

    def spy(*a, **k):
        out = real(*a, **k)
        taken.append(True)
        return out

    with monkeypatch.context() as m:
        m.setenv(parallel_read.WORKERS_ENV, "2" if parallel else "1")
        m.setattr(parse, "PARALLEL_MIN_BYTES", 0)
        m.setattr(parallel_read, "RANGE_BYTES", 32 << 10)
        m.setattr(parallel_read, "read_into", spy)
        doc = _analysis(path)
    assert bool(taken) == parallel
    return doc


@pytest.mark.parametrize("indent", [None, 1])
def test_multi_batch_replica_identical(indent, tmp_path: Path, monkeypatch) -> None:
    """Ranges of several ~1 MB batches each, both layouts: the same columns, names in the same order."""
    src = DATA / "h200_gathercast_small.trace.json.gz"
    path = replicate(src, tmp_path / "big.trace.json", 6, indent=indent)
    assert len(parallel_read.ranges(str(path), parse._head, 3 << 20)[1]) >= 2
    seq = _sequential(path, monkeypatch)
    par = _parallel(path, 3 << 20)
    assert par.meta["traceName"] == "replica"
    assert _columns(par) == _columns(seq)
    assert len(seq.k_ts) > 0 and len(seq.o_ts) > 0


def test_cut_inside_an_event_falls_back(tmp_path: Path, monkeypatch) -> None:
    """'},' newline '{' inside events (a list of objects in args, indented): a range cut there cannot parse to
    its end, the parallel reader refuses, and read() gives the sequential columns all the same."""
    src = DATA / "sglang-cpu-nostack-TP-0.trace.json.gz"
    path = replicate(src, tmp_path / "nested.trace.json", 1, nested=True)
    with pytest.raises(Exception):  # noqa: B017 - any refusal; read() must then fall back
        _parallel(path, 4 << 10)
    seq = _sequential(path, monkeypatch)
    with monkeypatch.context() as m:
        m.setenv(parallel_read.WORKERS_ENV, "2")
        m.setattr(parse, "PARALLEL_MIN_BYTES", 0)
        m.setattr(parallel_read, "RANGE_BYTES", 4 << 10)
        got = parse.read(path)
    assert _columns(got) == _columns(seq)


def test_truncated_file_one_clear_line(tmp_path: Path, monkeypatch) -> None:
    src = DATA / "sglang-cpu-nostack-TP-0.trace.json.gz"
    whole = _plain(src, tmp_path).read_bytes()
    cut = tmp_path / "cut.trace.json"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    monkeypatch.setenv(parallel_read.WORKERS_ENV, "2")
    monkeypatch.setattr(parse, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel_read, "RANGE_BYTES", 32 << 10)
    with pytest.raises(TraceError) as exc:
        parse.read(cut)
    assert "truncated" in str(exc.value) and "\n" not in str(exc.value)


def test_gzip_and_small_files_stay_sequential(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(parallel_read.WORKERS_ENV, raising=False)
    gz = DATA / "sglang-cpu-nostack-TP-0.trace.json.gz"
    # gzip: one stream, no ranges
    assert not parallel_read.eligible(str(gz), 0)
    plain = _plain(gz, tmp_path)
    # a few MB: sequential
    assert not parallel_read.eligible(str(plain), parse.PARALLEL_MIN_BYTES)
    assert parallel_read.eligible(str(plain), 0)
    monkeypatch.setenv(parallel_read.WORKERS_ENV, "1")
    assert not parallel_read.eligible(str(plain), 0)


def test_pool_that_cannot_start_falls_back(tmp_path: Path, monkeypatch) -> None:
    """No worker process (a daemonic parent, no fork): read() gives the sequential columns, no error."""
    plain = _plain(DATA / "sglang-cpu-nostack-TP-0.trace.json.gz", tmp_path)
    seq = _sequential(plain, monkeypatch)

    def refuse():
        raise OSError("no processes here")

    monkeypatch.setenv(parallel_read.WORKERS_ENV, "2")
    monkeypatch.setattr(parse, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel_read, "_context", refuse)
    with pytest.raises(OSError):
        parse.read_parallel(plain, range_bytes=32 << 10, n=2)
    assert _columns(parse.read(plain)) == _columns(seq)


def test_forkserver_workers_read_identically(tmp_path: Path, monkeypatch) -> None:
    """With other threads alive the pool starts by forkserver (fresh interpreters that import the reader's
    pieces by name): the same columns."""
    import multiprocessing

    plain = _plain(DATA / "sglang-cpu-nostack-TP-0.trace.json.gz", tmp_path)
    seq = _sequential(plain, monkeypatch)
    monkeypatch.setattr(parallel_read, "_context", lambda: multiprocessing.get_context("forkserver"))
    assert _columns(parse.read_parallel(plain, range_bytes=32 << 10, n=2)) == _columns(seq)
