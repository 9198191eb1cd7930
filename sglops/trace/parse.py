"""Stream a Chrome trace (plain or gzipped JSON) into compact columns.

Why not json.load: real traces reach 1-2 GB; a parsed event list costs ~10x the file in
RAM (HTA needed 6 GB for 800 MB). ijson's C backend walks the file one event at a time and
we keep only the few numbers the breakdown needs, in typed arrays (~40 bytes per kept event,
nothing for flows, args or metadata). Errors name the file, the event count and the byte
offset, and a broken file never yields a partial result.
"""

from __future__ import annotations

import gc
import gzip
import io
import os
import re
import sys
import zlib
from array import array
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from sglops.core.errors import SglopsError


def _ijson_backend():
    """ijson (imported only when the orjson fast path cannot vouch for a file): the C backend, ~10x faster
    than pure Python; fall back rather than refuse."""
    import ijson

    try:
        return ijson, ijson.get_backend("yajl2_c")
    except Exception:  # pragma: no cover - depends on the wheel
        return ijson, ijson


GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
OP_CATS = frozenset({"cpu_op", "user_annotation"})
# record_function ranges as seen on the GPU stream
GPU_SPAN_CAT = "gpu_user_annotation"
# with_stack: one event per Python frame, "file.py(LINE): function"
FRAME_CAT = "python_function"
# frames of C functions (getattr, Tensor.to): no file or line, never kept
BUILTIN = "<built-in"
# one forward step: torch's ProfilerStep#N, SGLang's `step[DECODE bs=1]`, vLLM's worker range
# `execute_context_0(0)_generation_1(1)` (`execute_N_context_...(sq..
# sk..)_generation_...` with detailed annotations)
STEP_RE = re.compile(
    r"^(ProfilerStep#\d+|step\[.*\]|execute_(?:\d+_)?context_\d+\(.*\)_generation_\d+\(.*\))$"
)
RANK_RE = re.compile(r"-TP-(\d+)")
STAGE_RE = re.compile(r"-(EXTEND|DECODE)\.trace\.json")
HEAD_BYTES = 1 << 20
# events per batch on the ijson path
SLOW_BATCH = 4096
# smaller files read sequentially: no pool start-up, not even its module's import
PARALLEL_MIN_BYTES = 48 << 20


class TraceError(SglopsError):
    """A trace file that cannot be read completely: truncated, not JSON, or not a trace."""


class _Counting(io.RawIOBase):
    """Counts decompressed bytes handed to the parser, so errors can say where they broke."""

    def __init__(self, inner) -> None:
        self.inner, self.pos = inner, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.inner.readinto(b)
        self.pos += n or 0
        return n

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        self.pos += len(data)
        return data


@dataclass
class RawTrace:
    """The columns one file contributes; names and threads are interned to small ints."""

    path: str
    rank: int | None = None
    stage: str | None = None
    meta: dict = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    events: int = 0
    # GPU activities
    k_ts: array = field(default_factory=lambda: array("d"))
    k_dur: array = field(default_factory=lambda: array("d"))
    k_corr: array = field(default_factory=lambda: array("q"))
    k_ext: array = field(default_factory=lambda: array("q"))
    k_name: array = field(default_factory=lambda: array("i"))
    k_dev: array = field(default_factory=lambda: array("i"))
    # runtime/driver launches carrying a correlation id
    l_ts: array = field(default_factory=lambda: array("d"))
    l_corr: array = field(default_factory=lambda: array("q"))
    l_thread: array = field(default_factory=lambda: array("i"))
    # 1: cudaGraphLaunch (a CUDA graph replay)
    l_graph: array = field(default_factory=lambda: array("b"))
    # CPU ops and annotations (incl. ProfilerStep# / step[...] spans)
    o_ts: array = field(default_factory=lambda: array("d"))
    o_dur: array = field(default_factory=lambda: array("d"))
    # "i" once a trace has 32K names
    o_name: array = field(default_factory=lambda: array("h"))
    # "i" once it has 32K threads
    o_thread: array = field(default_factory=lambda: array("h"))
    # "q" once an id needs it
    o_ext: array = field(default_factory=lambda: array("i"))
    # 1: user_annotation (record_function), 0: cpu_op
    o_annot: array = field(default_factory=lambda: array("b"))
    # GPU-side spans of record_function ranges (torch lists them as their own device rows)
    g_dur: array = field(default_factory=lambda: array("d"))
    g_name: array = field(default_factory=lambda: array("i"))
    # Python frames (traces taken with stacks), built-in functions dropped: 24 bytes each
    p_ts: array = field(default_factory=lambda: array("d"))
    p_dur: array = field(default_factory=lambda: array("d"))
    p_name: array = field(default_factory=lambda: array("i"))
    p_thread: array = field(default_factory=lambda: array("i"))


COLUMNS = tuple(f for f in RawTrace.__dataclass_fields__ if f[:2] in ("k_", "l_", "o_", "g_", "p_"))


def ids(column: array):
    """A numpy view of an id column at least 4 bytes wide (a copy only for a narrow one): arithmetic on 2-byte
    ids would wrap."""
    import numpy as np

    return np.frombuffer(column, dtype=column.typecode).astype(np.int32, copy=False)


def open_trace(path: str | os.PathLike):
    """A binary stream of the JSON text, gunzipping when the file starts with the gzip magic."""
    fh = open(path, "rb")
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")
    return fh


def _header(path: str) -> dict:
    """Top-level keys before traceEvents (torch writes distributedInfo, deviceProperties there)."""
    meta: dict = {}
    chunks: list[bytes] = []
    try:
        with open_trace(path) as fh:
            while sum(map(len, chunks)) < HEAD_BYTES and (chunk := fh.read(1 << 16)):
                chunks.append(chunk)
    # broken files are reported by read() with details
    except (OSError, EOFError, zlib.error):
        pass
    head = b"".join(chunks)
    try:
        for key, value in _ijson_backend()[1].kvitems(io.BytesIO(head), ""):
            if key == "traceEvents":
                break
            meta[key] = value
    # the head ends inside traceEvents (or the file is broken: read() will say)
    except Exception:
        pass
    return meta


def rank_of(path: str, meta: dict) -> int | None:
    m = RANK_RE.search(os.path.basename(path))
    if m:
        return int(m.group(1))
    dist = meta.get("distributedInfo") or {}
    rank = dist.get("rank") if isinstance(dist, dict) else None
    return int(rank) if isinstance(rank, int | float) else None


class _Ids(dict):
    """Interns a key to a small int on first sight: one dict lookup (C speed) for every key seen before."""

    def __missing__(self, key) -> int:
        value = self[key] = len(self)
        return value


def _fill(raw: RawTrace, column: str, values: list, wide: str = "q") -> None:
    """Append to a narrow column, widening it (to `wide`) the first time a value does not fit: 4 bytes per op
    for External ids, which in real traces stay far below 2**31, 2 for name and thread ids (a trace has a few
    hundred names; a hostile one may have millions)."""
    col = getattr(raw, column)
    try:
        col.fromlist(values)
    # fromlist leaves the column unchanged on error
    except OverflowError:
        col = array(wide, col)
        col.fromlist(values)
        setattr(raw, column, col)


class _Columns:
    """Appends the fields the breakdown needs from event dicts into a RawTrace."""

    def __init__(self, raw: RawTrace) -> None:
        self.raw, self.names, self.threads = raw, _Ids(), _Ids()

    def take(self, events) -> None:
        # the hot loop of every analysis: bound methods in locals, the commonest category (CPU ops) first
        raw, names, threads = self.raw, self.names, self.threads
        o_ts, o_dur, o_annot = raw.o_ts.append, raw.o_dur.append, raw.o_annot.append
        # ids of this batch's ops, into the narrow columns at the end (widened if one does not fit)
        exts: list[int] = []
        op_names: list[int] = []
        op_threads: list[int] = []
        o_ext, o_name, o_thread = exts.append, op_names.append, op_threads.append
        n = 0
        for ev in events:
            n += 1
            if ev.get("ph") != "X":
                continue
            cat = ev.get("cat")
            if cat in OP_CATS:
                name = ev.get("name", "?")
                nid = names[name]
                key = (ev.get("pid"), ev.get("tid"))
                tid = threads[key]
                o_ts(ev["ts"])
                o_dur(ev.get("dur", 0.0))
                o_name(nid)
                o_thread(tid)
                args = ev.get("args")
                o_ext(int(args.get("External id", -1)) if args else -1)
                o_annot(cat == "user_annotation")
            elif cat == FRAME_CAT:
                name = ev.get("name", "?")
                if name.startswith(BUILTIN):
                    continue
                nid = names[name]
                key = (ev.get("pid"), ev.get("tid"))
                tid = threads[key]
                raw.p_ts.append(ev["ts"])
                raw.p_dur.append(ev.get("dur", 0.0))
                raw.p_name.append(nid)
                raw.p_thread.append(tid)
            elif cat in GPU_CATS:
                args = ev.get("args") or {}
                name = ev.get("name", "?")
                nid = names[name]
                raw.k_ts.append(ev["ts"])
                raw.k_dur.append(ev.get("dur", 0.0))
                raw.k_corr.append(int(args.get("correlation", -1)))
                raw.k_ext.append(int(args.get("External id", -1)))
                raw.k_name.append(nid)
                dev = args.get("device", ev.get("pid", 0))
                raw.k_dev.append(dev if isinstance(dev, int) else 0)
            elif cat == GPU_SPAN_CAT:
                name = ev.get("name", "?")
                nid = names[name]
                raw.g_dur.append(ev.get("dur", 0.0))
                raw.g_name.append(nid)
            elif cat in LAUNCH_CATS:
                corr = (ev.get("args") or {}).get("correlation")
                if not corr:
                    continue
                key = (ev.get("pid"), ev.get("tid"))
                tid = threads[key]
                raw.l_ts.append(ev["ts"])
                raw.l_corr.append(int(corr))
                raw.l_thread.append(tid)
                raw.l_graph.append(ev.get("name", "").startswith("cudaGraphLaunch"))
        _fill(raw, "o_ext", exts)
        _fill(raw, "o_name", op_names, "i")
        _fill(raw, "o_thread", op_threads, "i")
        raw.events += n


class _NotFast(Exception):
    """The fast path cannot vouch for this file: parse it again with ijson."""


CHUNK = 1 << 20
# the largest single event the fast path holds (a 60 MB kernel name fits)
MAX_EVENT = 128 * CHUNK
# '}' then ',' then a raw newline: structural (JSON strings hold no raw newlines)
BOUNDARY = b"},\n"
OPEN, COMMA, CLOSE = b"[,]"


def _fast(path: str, cols: _Columns) -> dict:
    """Events in ~1 MB batches parsed by orjson; each batch is cut at an element boundary that
    orjson itself validates (a cut inside an event cannot parse as a list). Returns top-level
    metadata. Anything unexpected (one-line JSON, odd layout, a broken file) raises _NotFast."""
    with open_trace(path) as fh:
        meta, buf, _ = _head(fh)
        buf = _batches(fh, buf, cols)
        return {**meta, **_tail(bytes(buf[1:]), cols)}


def _head(fh) -> tuple[dict, bytearray, int]:
    """The top-level keys before traceEvents, the text read past its '[' (as a batch buffer opening with '['),
    and the offset in the JSON text where the array's elements start. _NotFast for any other layout."""
    import orjson

    buf = b""
    while True:
        chunk = fh.read(CHUNK)
        if not chunk:
            raise _NotFast
        buf += chunk
        i = buf.find(b'"traceEvents"')
        j = buf.find(b"[", i) if i >= 0 else -1
        if j >= 0:
            break
        if len(buf) > 4 * CHUNK:
            raise _NotFast
    try:
        meta = orjson.loads(buf[:i] + b'"traceEvents": []}')
    except orjson.JSONDecodeError:
        raise _NotFast from None
    if not isinstance(meta, dict) or meta.pop("traceEvents", None) != []:
        raise _NotFast
    # appended in place (one huge event, a 60 MB name, is not copied per chunk), always opening with '[': a
    # batch is parsed where it lies, its ',' turned into the closing ']' (no copy of the batch: 3 GB of
    # copies on a 1 GB trace, before)
    return meta, bytearray(b"[") + buf[j + 1 :], j + 1


def _batches(fh, buf: bytearray, cols: _Columns) -> bytearray:
    """Parse and take every batch that ends at a validated boundary until `fh` ends; returns the rest (opening
    with '['): the last events, and whatever follows them in the text read."""
    import orjson

    # the head of buf already searched for a boundary (none that parsed)
    scanned = 0
    while True:
        chunk = fh.read(CHUNK)
        buf += chunk
        if not chunk:
            return buf
        cut, tries, lo = len(buf), 0, max(0, scanned - len(BOUNDARY))
        while tries < 4:
            cut = buf.rfind(BOUNDARY, lo, cut)
            if cut < 0:
                break
            buf[cut + 1] = CLOSE
            view = memoryview(buf)[: cut + 2]
            try:
                events = orjson.loads(view)
            except orjson.JSONDecodeError:
                buf[cut + 1] = COMMA
                tries += 1
                continue
            finally:
                view.release()
            cols.take(events)
            del buf[: cut + 1]
            # the ',' after the batch opens the next one
            buf[0] = OPEN
            break
        scanned = len(buf)
        # no boundary in 128 MB: one-line JSON (or no trace): ijson streams it
        if len(buf) > MAX_EVENT:
            raise _NotFast


def _tail(buf: bytes, cols: _Columns) -> dict:
    """The end: the last events, the array's ']', then simple trailing keys and '}' (returned)."""
    import orjson

    end = len(buf)
    for _ in range(8):
        end = buf.rfind(b"]", 0, end)
        if end < 0:
            break
        tail = buf[end + 1 :].strip()
        try:
            events = orjson.loads(b"[" + buf[:end] + b"]")
            extra = {} if tail == b"}" else orjson.loads(b"{" + tail[1:]) if tail[:1] == b"," else None
        except orjson.JSONDecodeError:
            continue
        if isinstance(extra, dict):
            cols.take(events)
            return extra
    raise _NotFast


def _map_large_blocks() -> None:
    """Large blocks (the growing columns, the 1 MB batches) each in a mapping of their own, on glibc.

    Why: glibc raises its mmap threshold each time a mapped block is freed (up to 32 MB), after which the
    columns grow by realloc inside the heap and leave their old copies behind as holes: ~95 MB of a 1 GB
    trace's ~290 MB peak while reading. A fixed threshold keeps every block past 128 KB mapped, grown by
    mremap without a copy, and given back when freed. Elsewhere (or if it cannot be set) nothing changes."""
    global _MAPPED
    if _MAPPED or not sys.platform.startswith("linux"):
        return
    _MAPPED = True
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    # not glibc (musl has no mallopt): its allocator's behaviour stands
    except (OSError, AttributeError):
        pass


# glibc's mallopt parameter
M_MMAP_THRESHOLD = -3
_MAPPED = False


def read(path: str | os.PathLike) -> RawTrace:
    """Parse one trace file into columns; TraceError when it is incomplete or not a trace."""
    path = str(path)
    _map_large_blocks()
    if not Path(path).is_file():
        raise TraceError(f"{path}: no such trace file")
    m = STAGE_RE.search(os.path.basename(path))
    stage = m.group(1) if m else None
    raw = RawTrace(path=path, stage=stage)
    cols = _Columns(raw)
    # Parsing allocates millions of short-lived dicts and no cycles: the cyclic GC would only
    # rescan them (half the parse time on the real trace), so it pauses while we parse.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        try:
            raw.meta = _parallel(path, cols)
        # a file the ranges cannot vouch for, or no workers: the sequential reader, afresh
        except Exception:
            raw = RawTrace(path=path, stage=stage)
            cols = _Columns(raw)
            try:
                raw.meta = _fast(path, cols)
            # _NotFast, or a broken file: the ijson pass says precisely where
            except Exception:
                raw = RawTrace(path=path, stage=stage, meta=_header(path))
                cols = _Columns(raw)
                _slow(path, cols)
    finally:
        if gc_was_on:
            gc.enable()
    if not (len(raw.o_ts) or len(raw.k_ts) or len(raw.g_dur) or len(raw.l_ts) or len(raw.p_ts)):
        raise TraceError(
            f"{path}: no trace events to analyse ({raw.events} events, none a CPU op, kernel or "
            "Python frame); was the profiler on while the server ran?"
        )
    raw.rank = rank_of(path, raw.meta)
    raw.names = list(cols.names)
    return raw


def _parallel(
    path: str,
    cols: _Columns,
    range_bytes: int | None = None,
    n: int | None = None,
    min_bytes: int | None = None,
) -> dict:
    """Large plain files in worker processes (sglops/trace/parallel_read.py); _NotFast for the rest, so that
    small, gzipped and unusual files take the sequential path with no pool started."""
    min_bytes = PARALLEL_MIN_BYTES if min_bytes is None else min_bytes
    if os.path.getsize(path) < min_bytes:
        raise _NotFast
    from sglops.trace.parallel_read import Kit, eligible, read_into

    if not eligible(path, min_bytes):
        raise _NotFast
    return read_into(
        path, cols, Kit(head=_head, work=_read_range, fill=_fill, setup=_map_large_blocks), range_bytes, n
    )


def read_parallel(path: str | os.PathLike, range_bytes: int | None = None, n: int | None = None) -> RawTrace:
    """The parallel reader alone, whatever the file's size, with no sequential fallback: for tests and
    benchmarks that must know it was this path (raises where read() would fall back)."""
    path = str(path)
    _map_large_blocks()
    raw = RawTrace(path=path)
    cols = _Columns(raw)
    raw.meta = _parallel(path, cols, range_bytes, n, min_bytes=0)
    raw.rank = rank_of(path, raw.meta)
    raw.names = list(cols.names)
    return raw


class _Range:
    """A read()-able view of [lo, hi) of a file, by pread (workers share nothing but the path)."""

    def __init__(self, fd: int, lo: int, hi: int) -> None:
        self.fd, self.pos, self.hi = fd, lo, hi

    def read(self, n: int) -> bytes:
        n = min(n, self.hi - self.pos)
        if n <= 0:
            return b""
        data = os.pread(self.fd, n, self.pos)
        self.pos += len(data)
        return data


def _read_range(path: str, lo: int, hi: int, last: bool) -> tuple:
    """A parallel worker's part: one byte range's compact columns, (events, names, threads, {column: array},
    trailing metadata or None), parsed in batches exactly as _fast does. Raises when the range does not parse
    to its very end (the caller then reads the file sequentially)."""
    import orjson

    raw = RawTrace(path=path)
    cols = _Columns(raw)
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = _batches(_Range(fd, lo, hi), bytearray(b"["), cols)
    finally:
        os.close(fd)
    extra = None
    if last:
        extra = _tail(bytes(buf[1:]), cols)
    elif len(buf) > 1:
        if buf[-1] != COMMA:
            raise _NotFast
        buf[-1] = CLOSE
        # a JSONDecodeError here: the next range's start was inside an event
        cols.take(orjson.loads(buf))
    return raw.events, list(cols.names), list(cols.threads), {c: getattr(raw, c) for c in COLUMNS}, extra


def _slow(path: str, cols: _Columns) -> None:
    """ijson, one event at a time: any layout, and exact error positions for broken files."""
    ijson, _ijson = _ijson_backend()
    raw = cols.raw
    counted = None
    try:
        with open_trace(path) as fh:
            counted = _Counting(fh)
            stream = io.BufferedReader(counted, 1 << 18)
            items = _ijson.items(stream, "traceEvents.item", use_float=True)
            # batches: the columns take a batch's ids at once
            while batch := list(islice(items, SLOW_BATCH)):
                try:
                    cols.take(batch)
                except (KeyError, TypeError, ValueError) as exc:
                    if isinstance(exc, ijson.JSONError | ijson.IncompleteJSONError):
                        raise
                    raise TraceError(
                        f"{path}: event {raw.events + _first_bad(batch)} is not a trace event "
                        f"({type(exc).__name__}: {exc})"
                    ) from None
    except (ijson.IncompleteJSONError, ijson.JSONError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceError(
            f"{path}: invalid or truncated JSON after {raw.events} events, near byte "
            f"{counted.pos if counted else 0:,} of the JSON text ({detail}); not analysed"
        ) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(
            f"{path}: gzip stream broken after {raw.events} events, near byte "
            f"{counted.pos if counted else 0:,} of the JSON text ({exc}); incomplete file, not analysed"
        ) from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if raw.events == 0 and not _has_trace_events(path):
        raise TraceError(f"{path}: not a Chrome trace (no traceEvents array)")


def _first_bad(batch: list) -> int:
    """The index of the first event of a batch that the columns refuse (the error names it)."""
    for k, ev in enumerate(batch):
        try:
            _Columns(RawTrace(path="")).take([ev])
        except (KeyError, TypeError, ValueError):
            return k
    return 0


def _has_trace_events(path: str) -> bool:
    with open_trace(path) as fh:
        for prefix, event, _ in _ijson_backend()[1].parse(fh):
            if prefix == "traceEvents" and event == "start_array":
                return True
            if prefix == "" and event == "end_map":
                return False
    return False
