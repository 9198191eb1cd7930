"""GPU time by kernel, by launching CPU op, by step; GPU idle share. Torch's own semantics.

Attribution: a kernel's `correlation` id names the runtime/driver call that launched it
(External id linked 0 of 9,450 kernels in one older trace, so it is only the fallback). The
launch sits inside CPU ops on the same thread; every enclosing op gets the kernel's time.
That is what torch's key_averages calls device_time_total for an op: its own kernels plus
those of all nested ops (so aten::matmul == aten::mm, and ProfilerStep* == all kernels in
steps); same-name nested ops count once per occurrence, as in torch.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sglops.trace.parse import STEP_RE, RawTrace, ids
from sglops.trace.stacks import GRAPH_PREFIX, NO_FRAME, innermost, unique_inverse

if TYPE_CHECKING:
    import numpy as np

UNATTRIBUTED = "(no CPU op)"
# timestamps are ns rounded to us floats near 5e12: ~1 ns of noise
EPS_US = 0.005


@dataclass
class Breakdown:
    """Per-file numbers; the analysis sums them over ranks."""

    path: str
    rank: int | None
    stage: str | None
    gpu_name: str | None
    events: int
    kernels: int
    # kernels whose launch was found (correlation or External id)
    linked: int
    # sum of GPU activity durations
    gpu_us: float
    # first GPU start .. last GPU end (per device, summed)
    window_us: float
    # window minus the union of GPU activity
    idle_us: float
    # name -> [us, count]
    by_kernel: dict[str, list]
    # op name -> [device us incl. nested, count]
    by_op: dict[str, list]
    # record_function name -> [us on the GPU stream, count]
    by_gpu_span: dict[str, list]
    # scope -> {(innermost op, kernel): us}
    by_op_kernel: dict[str, dict]
    # one per step span: name, cpu_us, gpu_us, kernels
    steps: list[dict]
    # scope -> {(launching frame, kernel): us}
    by_source_kernel: dict[str, dict] = field(default_factory=dict)
    # Python frames kept (0: the trace was taken without stacks)
    frames: int = 0


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values, as np.unique gives them: plain np.unique imports numpy.ma on first use
    (~45 ms, a tenth of analyze-trace's whole run on a small trace)."""
    import numpy as np

    if not len(values):
        return values
    s = np.sort(values, kind="stable")
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def _idle(ts: np.ndarray, end: np.ndarray, dev: np.ndarray) -> tuple[float, float]:
    """(window, idle) summed over devices: gaps in the union of GPU intervals."""
    import numpy as np

    window = idle = 0.0
    for d in distinct(dev):
        sel = dev == d
        order = np.argsort(ts[sel], kind="stable")
        s, e = ts[sel][order], end[sel][order]
        reach = np.maximum.accumulate(e)
        gaps = s[1:] - reach[:-1]
        idle += float(gaps[gaps > 0].sum())
        window += float(reach[-1] - s[0])
    return window, idle


def _launch_points(raw: RawTrace, k_corr: np.ndarray, k_ext: np.ndarray):
    """Each kernel's (launch time, thread) or -1: by correlation, else by External id."""
    import numpy as np

    n = len(k_corr)
    l_corr = np.frombuffer(raw.l_corr, dtype=np.int64)
    t = np.full(n, np.nan)
    th = np.full(n, -1, dtype=np.int64)
    graph = np.zeros(n, dtype=bool)
    if len(l_corr):
        order = np.argsort(l_corr, kind="stable")
        sc = l_corr[order]
        pos = np.clip(np.searchsorted(sc, k_corr), 0, len(sc) - 1)
        hit = (sc[pos] == k_corr) & (k_corr >= 0)
        li = order[pos[hit]]
        t[hit] = np.frombuffer(raw.l_ts, dtype=np.float64)[li]
        th[hit] = np.frombuffer(raw.l_thread, dtype=np.int32)[li]
        if len(raw.l_graph) == len(l_corr):
            graph[hit] = np.frombuffer(raw.l_graph, dtype=np.int8)[li] > 0
    miss = (th < 0) & (k_ext >= 0)
    o_ext = np.frombuffer(raw.o_ext, dtype=raw.o_ext.typecode).astype(np.int64)
    if miss.any() and len(o_ext):
        order = np.argsort(o_ext, kind="stable")
        se = o_ext[order]
        pos = np.clip(np.searchsorted(se, k_ext[miss]), 0, len(se) - 1)
        ok = se[pos] == k_ext[miss]
        idx = np.flatnonzero(miss)[ok]
        oi = order[pos[ok]]
        t[idx] = np.frombuffer(raw.o_ts, dtype=np.float64)[oi]
        th[idx] = ids(raw.o_thread)[oi]
    return t, th, graph


def _arr(code: str, values: np.ndarray) -> array:
    """A typed array copy of a numpy array (no intermediate bytes object)."""
    import numpy as np

    out = array(code)
    out.frombytes(memoryview(np.ascontiguousarray(values)).cast("B"))
    return out


def _cut(stack: list[int], stack_end: list[float], limit: float) -> None:
    """Close every op that ended at or before `limit`, and everything nested above it."""
    if stack_end and min(stack_end) <= limit:
        for i, e in enumerate(stack_end):
            if e <= limit:
                del stack[i:], stack_end[i:]
                return


def _attribute(raw, k_dur, t, th, is_step):
    """Walk each thread's op nesting once; credit every enclosing op with the kernel's time.

    Returns (device us per op occurrence, innermost op per kernel, step occurrence per kernel).
    """
    import numpy as np

    o_ts = np.frombuffer(raw.o_ts, dtype=np.float64)
    o_dur = np.frombuffer(raw.o_dur, dtype=np.float64)
    o_th = ids(raw.o_thread)
    op_dev = np.zeros(len(o_ts))
    inner = np.full(len(k_dur), -1, dtype=np.int64)
    step_of = np.full(len(k_dur), -1, dtype=np.int64)
    for thread in distinct(th[th >= 0]):
        ops = np.flatnonzero(o_th == thread)
        # start asc, longer (outer) first
        ops = ops[np.lexsort((-o_dur[ops], o_ts[ops]))]
        ks = np.flatnonzero(th == thread)
        ks = ks[np.argsort(t[ks], kind="stable")]
        # typed arrays, not lists: 8 bytes per op instead of ~32 (a 1 GB trace has ~1.4M ops)
        starts, ends = _arr("d", o_ts[ops]), _arr("d", o_ts[ops] + o_dur[ops])
        ops_l = _arr("q", ops.astype(np.int64))
        steps_l = _arr("b", is_step[ops].astype(np.int8))
        del ops
        # positions into ops_l, outermost first
        stack: list[int] = []
        stack_end: list[float] = []
        j, n_ops = 0, len(ops_l)
        # device us per op of this thread (a dict cost ~100 B/op)
        credit = array("d", bytes(8 * n_ops))
        for k, tk, dk in zip(
            _arr("q", ks.astype(np.int64)), _arr("d", t[ks]), _arr("d", k_dur[ks]), strict=True
        ):
            while j < n_ops and starts[j] <= tk:
                # a sibling may start a rounding hair before its neighbour ends; an op that
                # outlasts the top of the stack is not nested in it
                _cut(stack, stack_end, starts[j] + EPS_US)
                while stack_end and ends[j] > stack_end[-1] + EPS_US:
                    stack.pop()
                    stack_end.pop()
                stack.append(j)
                stack_end.append(ends[j])
                j += 1
            _cut(stack, stack_end, tk - 1e-9)
            if not stack:
                continue
            step = -1
            for p in stack:
                credit[p] += dk
                if steps_l[p]:
                    step = p
            inner[k] = ops_l[stack[-1]]
            if step >= 0:
                step_of[k] = ops_l[step]
        op_dev[np.frombuffer(ops_l, dtype=np.int64)] += np.frombuffer(credit, dtype=np.float64)
    return op_dev, inner, step_of


def _pairs(first, k_name, k_dur, scopes: dict, names: list[str], missing: str) -> dict[str, dict]:
    """{scope: {(names[first], kernel name): us}} over each scope's kernels; first < 0 -> `missing`."""
    import numpy as np

    nn = max(len(names), 1)
    out: dict[str, dict] = {}
    for scope, mask in scopes.items():
        key = (first[mask] + 1) * nn + k_name[mask]
        if not len(key):
            out[scope] = {}
            continue
        uk, inv = unique_inverse(key)
        us = np.bincount(inv, weights=k_dur[mask])
        out[scope] = {
            (names[int(u // nn) - 1] if u // nn else missing, names[int(u % nn)]): float(v)
            for u, v in zip(uk.tolist(), us.tolist(), strict=True)
        }
    return out


def cpu_only_breakdown(raw: RawTrace) -> Breakdown:
    """The breakdown of a file with no GPU events, in plain Python: nothing on the GPU to attribute, the
    step spans' CPU time; numpy is not imported for it (a tenth of analyze-trace's run on a small trace)."""
    names = raw.names
    by_op: dict[str, list] = {}
    # counted per name id (in C), keyed in the order names first appear, as a per-op loop would key them
    for nid, count in Counter(raw.o_name).items():
        name = names[nid]
        row = by_op.setdefault("ProfilerStep*" if name.startswith("ProfilerStep#") else name, [0.0, 0])
        row[1] += count
    step_ids = {i for i, name in enumerate(names) if STEP_RE.match(name)}
    o_ts, o_dur = raw.o_ts, raw.o_dur
    steps = [
        (o_ts[i], i, {"name": names[nid], "ts": o_ts[i], "cpu_us": o_dur[i], "gpu_us": 0.0, "kernels": 0})
        for i, nid in enumerate(raw.o_name)
        if nid in step_ids
    ]
    by_gpu_span: dict[str, list] = {}
    for nid, dur in zip(raw.g_name, raw.g_dur, strict=True):
        row = by_gpu_span.setdefault(names[nid], [0.0, 0])
        row[0] += dur
        row[1] += 1
    return Breakdown(
        path=raw.path,
        rank=raw.rank,
        stage=raw.stage,
        gpu_name=None,
        events=raw.events,
        kernels=0,
        linked=0,
        gpu_us=0.0,
        window_us=0.0,
        idle_us=0.0,
        by_kernel={},
        by_op=by_op,
        by_gpu_span=by_gpu_span,
        by_op_kernel={"all": {}, "steps": {}, "decode": {}},
        steps=[s for _, _, s in sorted(steps, key=lambda x: (x[0], x[1]))],
        frames=len(raw.p_ts),
    )


def breakdown(raw: RawTrace) -> Breakdown:
    """Turn one file's columns into its kernel / op / step breakdown."""
    import numpy as np

    names = raw.names
    k_ts = np.frombuffer(raw.k_ts, dtype=np.float64)
    k_dur = np.frombuffer(raw.k_dur, dtype=np.float64)
    k_name = np.frombuffer(raw.k_name, dtype=np.int32)
    k_corr = np.frombuffer(raw.k_corr, dtype=np.int64)
    k_ext = np.frombuffer(raw.k_ext, dtype=np.int64)
    k_dev = np.frombuffer(raw.k_dev, dtype=np.int32)
    o_name = ids(raw.o_name)
    nn = max(len(names), 1)
    is_step = (
        np.array([bool(STEP_RE.match(n)) for n in names], dtype=bool)[o_name]
        if len(o_name)
        else np.zeros(0, dtype=bool)
    )

    kus = np.bincount(k_name, weights=k_dur, minlength=nn)
    kcnt = np.bincount(k_name, minlength=nn)
    by_kernel = {names[i]: [float(kus[i]), int(kcnt[i])] for i in np.flatnonzero(kcnt)}

    t, th, graph = _launch_points(raw, k_corr, k_ext)
    op_dev, inner, step_of = _attribute(raw, k_dur, t, th, is_step)
    ous = np.bincount(o_name, weights=op_dev, minlength=nn)
    ocnt = np.bincount(o_name, minlength=nn)
    by_op = {}
    for i in np.flatnonzero(ocnt):
        key = "ProfilerStep*" if names[i].startswith("ProfilerStep#") else names[i]
        cur = by_op.setdefault(key, [0.0, 0])
        cur[0] += float(ous[i])
        cur[1] += int(ocnt[i])

    g_name = np.frombuffer(raw.g_name, dtype=np.int32)
    gus = np.bincount(g_name, weights=np.frombuffer(raw.g_dur, dtype=np.float64), minlength=nn)
    gcnt = np.bincount(g_name, minlength=nn)
    by_gpu_span = {names[i]: [float(gus[i]), int(gcnt[i])] for i in np.flatnonzero(gcnt)}

    # (innermost op, kernel) time in three scopes, for the diagnosis rules
    inner_name = np.where(inner >= 0, o_name[np.clip(inner, 0, None)] if len(o_name) else -1, -1)
    step_name = np.where(step_of >= 0, o_name[np.clip(step_of, 0, None)] if len(o_name) else -1, -1)
    decode_ids = np.array([i for i, n in enumerate(names) if n.startswith("step[DECODE")], dtype=np.int64)
    scopes = {
        "all": np.ones(len(k_dur), dtype=bool),
        "steps": step_of >= 0,
        "decode": np.isin(step_name, decode_ids) & (step_of >= 0),
    }
    by_op_kernel = _pairs(inner_name, k_name, k_dur, scopes, names, UNATTRIBUTED)
    by_source_kernel: dict[str, dict] = {}
    # a stack-carrying trace: the Python frame that launched each kernel
    if len(raw.p_ts):
        frame = np.frombuffer(innermost(raw, _arr("d", t), _arr("i", th.astype(np.int32))), dtype=np.int32)
        frame = frame.astype(np.int64)
        # a CUDA graph replay's kernels were launched by the replay call, not by the line that captured them:
        # their frame is marked so the view says so (and no probe finding is joined to the replay's frame)
        replayed = graph & (frame >= 0)
        frame[replayed] += len(names)
        by_source_kernel = _pairs(
            frame, k_name, k_dur, scopes, names + [GRAPH_PREFIX + n for n in names], NO_FRAME
        )

    steps = []
    if is_step.any():
        sidx = np.flatnonzero(is_step)
        kcount = np.bincount(step_of[step_of >= 0], minlength=len(o_name))
        o_ts = np.frombuffer(raw.o_ts, dtype=np.float64)
        o_dur = np.frombuffer(raw.o_dur, dtype=np.float64)
        for i in sidx[np.argsort(o_ts[sidx], kind="stable")].tolist():
            steps.append(
                {
                    "name": names[o_name[i]],
                    "ts": float(o_ts[i]),
                    "cpu_us": float(o_dur[i]),
                    "gpu_us": float(op_dev[i]),
                    "kernels": int(kcount[i]),
                }
            )

    window = idle = 0.0
    if len(k_ts):
        window, idle = _idle(k_ts, k_ts + k_dur, k_dev)
    dev_props = raw.meta.get("deviceProperties") or []
    gpu_name = dev_props[0].get("name") if dev_props and isinstance(dev_props[0], dict) else None
    return Breakdown(
        path=raw.path,
        rank=raw.rank,
        stage=raw.stage,
        gpu_name=gpu_name,
        events=raw.events,
        kernels=len(k_dur),
        linked=int((th >= 0).sum()),
        gpu_us=float(k_dur.sum()),
        window_us=window,
        idle_us=idle,
        by_kernel=by_kernel,
        by_op=by_op,
        by_gpu_span=by_gpu_span,
        by_op_kernel=by_op_kernel,
        steps=steps,
        by_source_kernel=by_source_kernel,
        frames=len(raw.p_ts),
    )
