"""Python frames of a stack-carrying trace: which SGLang function launched each kernel or ran each CPU op.

Why: a kernel's name says what ran ("dtype conversion"), not which line of SGLang asked for it. A trace taken
with `with_stack` holds one `python_function` event per Python frame, on the thread that ran it; the frames
enclosing a kernel's launch (or a CPU op's start), by time, are the Python stack that launched it. The
innermost frame whose file is under `sglang/` is the line an SGLang engineer edits; where no SGLang frame
encloses it, the innermost frame with a file (torch's, a library's) is kept instead.

What torch writes (2.11, 2.14, read from real traces): a frame is named `path/file.py(LINE): function`, the
path cut to the `sys.path` entry (`sglang/srt/managers/scheduler.py`); LINE is the frame's line when torch
first saw it: the function's first line for a call made while profiling (`def` or its decorator), the line it
was running for frames already on the stack when the profiler started. Frames of C functions
(`<built-in method to of Tensor ...>`) carry no file and are dropped by the parser.
"""

from __future__ import annotations

import re
import sys
from array import array
from dataclasses import dataclass
from typing import Any

FRAME_RE = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.+)$")
SGLANG_DIR = "sglang/"
# a kernel or op with no file frame around it
NO_FRAME = "(no Python frame)"
# a frame that replayed a graph: its kernels were captured elsewhere
GRAPH_PREFIX = "[CUDA graph replay] "
# as in breakdown: timestamps are ns rounded to us floats
EPS_US = 0.005


@dataclass(frozen=True)
class Frame:
    """One Python frame as torch names it."""

    file: str
    line: int
    func: str

    @property
    def sglang(self) -> bool:
        return ("/" + self.file).rfind("/" + SGLANG_DIR) >= 0

    @property
    def rel(self) -> str:
        """The path inside the sglang package (`srt/layers/attention/x.py`), as probes and patches name it."""
        return package_path(self.file)

    @property
    def label(self) -> str:
        """`flashinfer_mla_backend.py:615 (forward_decode)`."""
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} ({self.func})"

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "func": self.func, "sglang": self.sglang}


def package_path(path: str) -> str:
    """A path relative to the sglang package: the part after the last `sglang/` folder (a git checkout's
    `python/sglang/srt/x.py`, an install's `.../site-packages/sglang/srt/x.py` and torch's `sglang/srt/x.py`
    all give `srt/x.py`); a path with no such folder is returned as it is."""
    p = "/" + path.replace("\\", "/")
    i = p.rfind("/" + SGLANG_DIR)
    return p[i + 1 + len(SGLANG_DIR) :] if i >= 0 else path


def parse_frame(name: str) -> Frame | None:
    """`sglang/srt/x.py(615): forward_decode` -> Frame; None for a name that is not a file frame."""
    m = FRAME_RE.match(name)
    if not m:
        return None
    return Frame(m.group("file"), int(m.group("line")), m.group("func"))


# past this many items numpy sorts (8 bytes an item); Python's keyed sort costs ~150
LARGE = 100_000


def use_numpy(n: int) -> bool:
    """numpy for sorting when a GPU trace loaded it anyway or the input is large; a small CPU-only trace is
    analysed without importing it (0.1 s, a tenth of `inv analyze-trace` on one)."""
    return "numpy" in sys.modules or n > LARGE


def sorted_groups(values: Any) -> tuple[Any, Any, Any]:
    """(order, sorted values, first-of-group flags) of a numpy array: what np.unique computes, without
    np.unique, whose first call imports numpy.ma (~45 ms of a small trace's whole command)."""
    import numpy as np

    order = np.argsort(values, kind="stable")
    s = values[order]
    flags = np.empty(len(s), dtype=bool)
    flags[:1] = True
    flags[1:] = s[1:] != s[:-1]
    return order, s, flags


def unique_inverse(values: Any) -> tuple[Any, Any]:
    """np.unique(values, return_inverse=True), for a 1-d integer array."""
    import numpy as np

    order, s, flags = sorted_groups(values)
    inverse = np.empty(len(s), dtype=np.intp)
    inverse[order] = np.cumsum(flags) - 1
    return s[flags], inverse


def unique_first(values: Any) -> tuple[Any, Any]:
    """np.unique(values, return_index=True), for a 1-d integer
    array: each distinct value and where it first is."""
    order, s, flags = sorted_groups(values)
    return s[flags], order[flags]


# items per numpy pass in thread_order: its temporaries stay a few MB at any trace size
CHUNK = 1 << 18
# past this many threads, one stable argsort by thread instead of a pass per thread
FEW_THREADS = 16


def _neg_dur(t, d):
    return -d


def thread_order(ts: array, th: array, dur: array | None = None, third=_neg_dur) -> array:
    """Indices by thread, then start, then (with durations) `third(ts, dur)` ascending; ties in file order.

    Why not one lexsort: its keys and index cost ~40 bytes per item (90 MB for the 2.3M frames of a 1 GB stack
    trace). Torch writes each thread's events already in this order (every real trace here), so the order is
    each thread's events as they appear (4 bytes per item, found a thread at a time in 256K-item chunks),
    checked chunk by chunk; a file that is not in order is sorted as before. The result is the stable sort's
    either way. Items of a thread < 0 (no point, in `innermost`) come first, in file order: callers skip
    them."""
    n = len(ts)
    if not use_numpy(n):
        if dur is None:
            return sorted(range(n), key=lambda i: (th[i], ts[i]))
        return sorted(range(n), key=lambda i: (th[i], ts[i], third(ts[i], dur[i])))
    import numpy as np

    t_np = np.frombuffer(ts, dtype=np.float64)
    th_np = np.frombuffer(th, dtype=th.typecode)
    d_np = np.frombuffer(dur, dtype=np.float64) if dur is not None else None
    values = sorted({int(v) for lo in range(0, n, CHUNK) for v in unique_first(th_np[lo : lo + CHUNK])[0]})
    out = array("i" if n < 2**31 else "q")
    if len(values) <= FEW_THREADS:
        bounds = []
        for v in values:
            start = len(out)
            for lo in range(0, n, CHUNK):
                hit = np.flatnonzero(th_np[lo : lo + CHUNK] == v)
                if len(hit):
                    out.frombytes(memoryview((hit + lo).astype(out.typecode)).cast("B"))
            bounds.append((v, start, len(out)))
        idx = np.frombuffer(out, dtype=out.typecode)
        if all(v < 0 or _in_order(idx[a:b], t_np, d_np, third) for v, a, b in bounds):
            return out
        del idx
    keys = (t_np, th_np) if d_np is None else (third(t_np, d_np), t_np, th_np)
    order = np.lexsort(keys)
    out = array("i" if n < 2**31 else "q")
    out.frombytes(memoryview(order.astype(out.typecode, copy=False)).cast("B"))
    return out


def _in_order(idx, t_np, d_np, third) -> bool:
    """Whether these items (one thread's, in file order) are already sorted by (start, third), in chunks."""
    for lo in range(0, len(idx), CHUNK):
        # one item of overlap: the pair across chunk boundaries
        sel = idx[max(lo - 1, 0) : lo + CHUNK]
        t = t_np[sel]
        later, same = t[1:] > t[:-1], t[1:] == t[:-1]
        if d_np is not None:
            k = third(t, d_np[sel])
            ok = later | (same & (k[1:] >= k[:-1]))
        else:
            ok = later | same
        if not ok.all():
            return False
    return True


def innermost(raw, t: array, th: array) -> array:
    """For each point (time t[i] on thread th[i]; th < 0: no point), the name id of the innermost SGLang frame
    enclosing it, else of the innermost frame with a file, else -1.

    One sweep per thread over frames (start order, outer first) and points (time order), with a stack of the
    open frames and, per level, the innermost SGLang frame at or below it: O((frames + points) log) and
    4 bytes per point."""
    n = len(t)
    out = array("i", [-1]) * n
    if not n or not len(raw.p_ts):
        return out
    names = raw.names
    sg: dict[int, bool] = {}
    for nid in set(raw.p_name):
        f = parse_frame(names[nid])
        sg[nid] = bool(f and f.sglang)
    p_ts, p_dur, p_name, p_th = raw.p_ts, raw.p_dur, raw.p_name, raw.p_thread
    frames = thread_order(p_ts, p_th, p_dur)
    points = thread_order(t, th)
    j, nf = 0, len(frames)
    stack_end: list[float] = []
    stack_name: list[int] = []
    # per level: the name id of the innermost SGLang frame at or below it, or -1
    stack_sg: list[int] = []
    cur = None
    for i in points:
        ti, hi = t[i], th[i]
        if hi < 0:
            continue
        if hi != cur:
            stack_end.clear()
            stack_name.clear()
            stack_sg.clear()
            cur = hi
            while j < nf and p_th[frames[j]] < hi:
                j += 1
        while j < nf and p_th[frames[j]] == hi and p_ts[frames[j]] <= ti:
            f = frames[j]
            s, e = p_ts[f], p_ts[f] + p_dur[f]
            while stack_end and (stack_end[-1] <= s + EPS_US or e > stack_end[-1] + EPS_US):
                stack_end.pop()
                stack_name.pop()
                stack_sg.pop()
            nid = p_name[f]
            stack_sg.append(nid if sg[nid] else (stack_sg[-1] if stack_sg else -1))
            stack_end.append(e)
            stack_name.append(nid)
            j += 1
        while stack_end and stack_end[-1] < ti:
            stack_end.pop()
            stack_name.pop()
            stack_sg.pop()
        if stack_end:
            out[i] = stack_sg[-1] if stack_sg[-1] >= 0 else stack_name[-1]
    return out
