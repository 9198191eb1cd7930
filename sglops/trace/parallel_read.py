"""Read a large plain-JSON trace in parallel worker
processes, into the same RawTrace as the sequential reader.

Why: orjson's dicts of every event and the per-event loop that keeps a few numbers are ~20 s of CPU on a 1 GB
trace, one core's work; the file splits into independent ranges. The parent cuts the event array at candidate
element boundaries (`},` + newline + `{`), workers `pread` a range each, parse it in ~1 MB batches exactly as
the sequential reader does and send back compact columns (typed arrays, the range's own name and thread
tables), never event dicts; the parent maps the range's ids to the trace's interned ids in file order, so
names and threads get the very ids the sequential reader gives them.

Why a cut the parent guesses is safe: every range must parse completely, its last batch ending exactly at the
next range's start. The first range starts at a true element boundary (just after '['), and a JSON text that
starts at an element and parses as a list up to a '}' ends at an element boundary (objects end at their
matching brace); so each range proves the next one's start. A guess inside an event makes the range before it
fail, and the caller then reads the file sequentially: a wrong guess costs time, never a wrong column.
"""

from __future__ import annotations

import gc
import os
import re
import threading
from typing import Any, NamedTuple

# 1: always the sequential reader; N: at most N worker processes
WORKERS_ENV = "SGLOPS_TRACE_WORKERS"
# text per task: small results, and a bounded number of them in flight
RANGE_BYTES = 16 << 20
# '},' newline '{': an element boundary in both layouts we meet
CANDIDATE = re.compile(rb"\},\n[ \t\r\n]*\{")
# column: its wide typecode
NAME_COLUMNS = {"k_name": "i", "o_name": "i", "g_name": "i", "p_name": "i"}
THREAD_COLUMNS = {"l_thread": "i", "o_thread": "i", "p_thread": "i"}
WIDE = {"o_ext": "q"}
# each adds ~24 MB of its own (measured): the parent's ~190 MB while reading + 4 x 24 < 300 MB
MAX_WORKERS = 4


class Kit(NamedTuple):
    """What this module needs of the sequential reader (sglops/trace/parse.py), handed in by it: parse imports
    this module, never the reverse. work and setup run in the workers (module-level functions: pickled by
    name)."""

    # fh -> (metadata, rest, offset where the array's elements start); raises for another layout
    head: Any
    # (path, lo, hi, last) -> (events, names, threads, {column: array}, trailing metadata or None)
    work: Any
    # (raw, column, values, wide): append, widening a narrow column
    fill: Any
    # () -> None, once per worker
    setup: Any


def workers() -> int:
    """Worker processes to use: SGLOPS_TRACE_WORKERS if set, else the cores this process may run on, at least
    2 and at most MAX_WORKERS."""
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(2, min(cores, MAX_WORKERS))


def eligible(path: str, min_bytes: int) -> bool:
    """Plain (not gzipped) files of min_bytes or more only, and only when more than one worker is allowed."""
    if workers() < 2:
        return False
    try:
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                return False
            return os.fstat(fh.fileno()).st_size >= min_bytes
    except OSError:
        return False


def ranges(path: str, head, range_bytes: int | None = None) -> tuple[dict, list[tuple[int, int]]]:
    """The top-level metadata and the byte ranges of the event array, each (but the first) starting just after
    the ',' of a candidate boundary; the last range runs to the end of the file. `head` raises for another
    layout."""
    range_bytes = max(1, RANGE_BYTES if range_bytes is None else range_bytes)
    with open(path, "rb") as fh:
        meta, _, start = head(fh)
        size = os.fstat(fh.fileno()).st_size
        fd = fh.fileno()
        cuts = [start]
        pos = start + range_bytes
        while pos < size:
            window = os.pread(fd, 1 << 20, pos)
            m = CANDIDATE.search(window)
            # no candidate in 1 MB: the range grows to the next one that has one
            if m is None:
                pos += len(window) - 64 if len(window) > 128 else len(window) + 1
                continue
            cuts.append(pos + m.start() + 2)
            pos = cuts[-1] + range_bytes
    bounds = cuts + [size]
    return meta, [(bounds[k], bounds[k + 1]) for k in range(len(cuts))]


def _start(setup) -> None:
    """Worker start-up: the reader's allocator setting, and no cyclic GC (millions of short-lived dicts)."""
    setup()
    gc.disable()


def _context():
    """'fork' (no start-up cost) while this process has one thread; 'forkserver' otherwise (fork copies other
    threads' locks in whatever state they are)."""
    import multiprocessing

    return multiprocessing.get_context("fork" if threading.active_count() == 1 else "forkserver")


def merge(cols, part: tuple, fill) -> dict | None:
    """Append one range's columns, its names and threads interned in the order the range met them."""
    import numpy as np

    events, names, threads, columns, extra = part
    raw = cols.raw
    name_map = np.array([cols.names[n] for n in names], dtype=np.int64)
    thread_map = np.array([cols.threads[t] for t in threads], dtype=np.int64)
    for column, values in columns.items():
        if not len(values):
            continue
        table = name_map if column in NAME_COLUMNS else thread_map if column in THREAD_COLUMNS else None
        if table is not None:
            local = np.frombuffer(values, dtype=values.typecode)
            fill(raw, column, table[local].tolist(), NAME_COLUMNS.get(column) or THREAD_COLUMNS[column])
            continue
        col = getattr(raw, column)
        if col.typecode == values.typecode:
            col.extend(values)
        # one side was widened: a value of this range does not fit the trace's column so far
        else:
            fill(raw, column, values.tolist(), WIDE.get(column, values.typecode))
    raw.events += events
    return extra


def read_into(path: str, cols, kit: Kit, range_bytes: int | None = None, n: int | None = None) -> dict:
    """Fill cols from the file's ranges read by n workers, in file order; returns the top-level metadata.
    Any failure (a layout the ranges cannot vouch for, a broken file, a worker that cannot start) raises:
    the caller discards cols and reads sequentially."""
    # here: a small trace never pays for the import
    from concurrent.futures import ProcessPoolExecutor

    meta, spans = ranges(path, kit.head, range_bytes)
    n = n or workers()
    extra = None
    with ProcessPoolExecutor(
        max_workers=min(n, len(spans)), mp_context=_context(), initializer=_start, initargs=(kit.setup,)
    ) as pool:
        pending = []
        try:
            for k, (lo, hi) in enumerate(spans):
                pending.append(pool.submit(kit.work, path, lo, hi, k == len(spans) - 1))
                # in order, a bounded window
                while len(pending) > 2 * n or (k == len(spans) - 1 and pending):
                    got = merge(cols, pending.pop(0).result(), kit.fill)
                    extra = got if got is not None else extra
        except BaseException:
            for f in pending:
                f.cancel()
            raise
    if extra is None:
        raise ValueError(f"{path}: no range reached the end of the event array")
    return {**meta, **extra}


__all__ = ["Kit", "eligible", "merge", "ranges", "read_into", "workers"]
