"""The CPU side of a trace: what the scheduler loop and the ops on the CPU spend their time on.

Why: a CPU-only SGLang trace (a host with no GPU, or `activities: ["CPU"]`) has no kernels, and
on a GPU trace the question after "which kernel" is often "why is the GPU idle": the answer is
on the CPU. SGLang marks its scheduler loop with record_function ranges (`scheduler.recv_requests`,
`scheduler.get_next_batch_to_run`, `scheduler.run_batch` (which holds `step[DECODE bs=N]` /
`step[EXTEND bs=N toks=M]` and `copy_result_to_cpu`), `scheduler.process_batch_result`,
`scheduler.idle`); torch records every aten op as `cpu_op`. From those:
- self time per op (its duration minus its direct children's, on its own thread);
- loop iterations (one per `scheduler.recv_requests`), each tagged with the step it ran;
- on GPU traces, the CPU ops and phases that overlap the GPU's idle gaps.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field

from sglops.trace.parse import STEP_RE, RawTrace, ids
from sglops.trace.stacks import CHUNK, NO_FRAME, innermost, thread_order, unique_first, use_numpy

PHASE_RE = re.compile(r"^(scheduler\.\w+|copy_result_to_cpu)$")
# the first thing each pass of SGLang's event loop does
ITERATION_START = "scheduler.recv_requests"
STEP_KIND_RE = re.compile(r"^step\[(\w+)")
# requests of each kind
VLLM_STEP_RE = re.compile(r"^execute_(?:\d+_)?context_(\d+)\(.*\)_generation_(\d+)\(")
# as in breakdown: timestamps are ns rounded to us floats
EPS_US = 0.005


def op_key(name: str) -> str:
    """How ops are grouped: by name, all ProfilerStep#N together (as torch's key_averages does)."""
    return "ProfilerStep*" if name.startswith("ProfilerStep#") else name


def step_kind(name: str) -> str:
    """`step[DECODE bs=1]` -> DECODE; `ProfilerStep#3` -> ProfilerStep; vLLM's
    `execute_context_0(0)_generation_1(1)` -> DECODE (prefill requests only: EXTEND, both: MIXED); anything
    else as is."""
    if name.startswith("ProfilerStep#"):
        return "ProfilerStep"
    v = VLLM_STEP_RE.match(name)
    if v:
        ctx, gen = int(v.group(1)), int(v.group(2))
        return "MIXED" if ctx and gen else "EXTEND" if ctx else "DECODE"
    m = STEP_KIND_RE.match(name)
    return m.group(1) if m else name


@dataclass
class CpuView:
    """One file's CPU numbers; the analysis sums them over ranks."""

    # cpu_op + user_annotation events
    ops: int
    threads: int
    # first .. last op on the busiest thread
    main_thread_window_us: float
    # union of its outermost ops
    main_thread_busy_us: float
    # name -> [self us, count, total us, 1 if annotation]
    by_self: dict[str, list]
    # scheduler phase -> [us, count]
    phases: dict[str, list]
    # one per scheduler loop pass: ts, us, kind, step, phases {name: us}
    iterations: list[dict]
    # GPU traces: idle gaps inside the GPU's active window
    gpu_idle_us: float = 0.0
    # of those, covered by an op on the launching thread
    idle_cpu_us: float = 0.0
    # phase -> us inside GPU gaps
    idle_by_phase: dict[str, float] = field(default_factory=dict)
    # op -> its self us inside GPU gaps
    idle_by_self: dict[str, float] = field(default_factory=dict)
    # (Python frame, op) -> self us
    by_source_op: dict[tuple[str, str], float] = field(default_factory=dict)


def _parents(ts: array, dur: array, th: array) -> array:
    """Each op's innermost enclosing op on the same thread (-1 for an outermost one). Plain Python over
    typed arrays (4 bytes per op, and 4 for the order): a CPU-only trace is analysed without importing numpy
    at all; ends are `ts + dur` as they are needed, not a column of their own (8 bytes per op)."""
    n = len(ts)
    out = array("i", [-1]) * n
    order = thread_order(ts, th, dur, _before_end)
    stack: list[int] = []
    stack_end: list[float] = []
    cur = None
    for i in order:
        s, t = ts[i], th[i]
        e = s + dur[i]
        if t != cur:
            stack.clear()
            stack_end.clear()
            cur = t
        # closed before this one starts (a hair of rounding allowed), or outlasted by it: not its parent
        while stack and (stack_end[-1] <= s + EPS_US or e > stack_end[-1] + EPS_US):
            stack.pop()
            stack_end.pop()
        out[i] = stack[-1] if stack else -1
        stack.append(i)
        stack_end.append(e)
    return out


def _self_times(parent: array, dur: array, nid: array, annot: array) -> tuple[array, dict[int, list]]:
    """Each op's children's time, and per name id [self us, count, total us, annotation] (ids in the order
    they first appear): plain Python, for a trace small enough not to import numpy for."""
    child_dur = array("d", [0.0]) * len(dur)
    for i, p in enumerate(parent):
        if p >= 0:
            child_dur[p] += dur[i]
    by_id: dict[int, list] = {}
    for k, d, cd, a in zip(nid, dur, child_dur, annot, strict=True):
        row = by_id.get(k)
        if row is None:
            row = by_id[k] = [0.0, 0, 0.0, 0]
        row[0] += d - cd
        row[1] += 1
        row[2] += d
        row[3] |= a
    return child_dur, by_id


def _self_times_np(parent: array, dur: array, nid: array, annot: array) -> tuple[array, dict[int, list]]:
    """_self_times with numpy, the same sums to the last bit: `np.add.at` adds in index order, as the loop
    does, chunk after chunk into the same accumulators (a few MB of temporaries at any size; 4x faster at 6M
    ops)."""
    import numpy as np

    n = len(dur)
    child_dur = array("d", [0.0]) * n
    child = np.frombuffer(child_dur, dtype=np.float64)
    par = np.frombuffer(parent, dtype=parent.typecode)
    d_np = np.frombuffer(dur, dtype=np.float64)
    for lo in range(0, n, CHUNK):
        p = par[lo : lo + CHUNK]
        has = p >= 0
        np.add.at(child, p[has], d_np[lo : lo + CHUNK][has])
    k_np = ids(nid)
    a_np = np.frombuffer(annot, dtype=np.int8)
    size = int(k_np.max()) + 1 if n else 0
    slf, tot = np.zeros(size), np.zeros(size)
    cnt, ann = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int8)
    # where each name id first appears
    first = np.full(size, n, dtype=np.int64)
    for lo in range(0, n, CHUNK):
        k, d = k_np[lo : lo + CHUNK], d_np[lo : lo + CHUNK]
        np.add.at(slf, k, d - child[lo : lo + CHUNK])
        np.add.at(tot, k, d)
        np.add.at(cnt, k, 1)
        np.bitwise_or.at(ann, k, a_np[lo : lo + CHUNK])
        new, at = unique_first(k)
        first[new] = np.minimum(first[new], at + lo)
    seen = np.flatnonzero(first < n)
    by_id = {
        int(i): [float(slf[i]), int(cnt[i]), float(tot[i]), int(ann[i])]
        for i in seen[np.argsort(first[seen], kind="stable")]
    }
    return child_dur, by_id


def _before_end(t, d):
    """The nesting order's third key: start minus end, so the longer (outer) of two ops that start together
    comes first."""
    return t - (t + d)


def gpu_gaps(k_ts, k_end):
    """(starts, ends) of the gaps in the union of GPU activity, inside its first start .. last end (numpy)."""
    import numpy as np

    if len(k_ts) < 2:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(k_ts, kind="stable")
    s, e = k_ts[order], np.maximum.accumulate(k_end[order])
    keep = s[1:] > e[:-1] + EPS_US
    return e[:-1][keep], s[1:][keep]


def _covered(starts, ends, gs, ge):
    """For each interval [starts, ends], how much of it lies inside the sorted, disjoint gaps [gs, ge]."""
    import numpy as np

    if not len(gs):
        return np.zeros(len(starts))
    cum = np.concatenate(([0.0], np.cumsum(ge - gs)))

    # gap time before t
    def upto(t):
        # gaps starting at or before t
        i = np.searchsorted(gs, t, side="right")
        last = np.clip(i - 1, 0, len(gs) - 1)
        inside = np.clip(t - gs[last], 0.0, ge[last] - gs[last])
        return np.where(i > 0, cum[np.maximum(i - 1, 0)] + inside, 0.0)

    return np.maximum(upto(ends) - upto(starts), 0.0)


def _grouped(per_name: dict[int, float], names: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, v in per_name.items():
        if v > 0:
            key = op_key(names[i])
            out[key] = out.get(key, 0.0) + v
    return out


def cpu_view(raw: RawTrace, main_thread: int | None = None) -> CpuView:
    """The CPU view of one file. `main_thread`: the thread that launches the kernels, when known."""
    names = raw.names
    ts, dur, th, nid = raw.o_ts, raw.o_dur, raw.o_thread, raw.o_name
    n = len(ts)
    annot = raw.o_annot if len(raw.o_annot) == n else array("b", bytes(n))
    parent = _parents(ts, dur, th)
    child_dur, by_id = (_self_times_np if use_numpy(n) else _self_times)(parent, dur, nid, annot)
    by_self: dict[str, list] = {}
    for i, (slf, cnt, tot, ann) in by_id.items():
        row = by_self.setdefault(op_key(names[i]), [0.0, 0, 0.0, int(ann)])
        row[0] += slf
        row[1] += cnt
        row[2] += tot
    phase_ids = {i for i, name in enumerate(names) if PHASE_RE.match(name)}
    step_ids = {i for i, name in enumerate(names) if STEP_RE.match(name)}
    phases = {names[i]: [by_id[i][2], by_id[i][1]] for i in sorted(phase_ids) if i in by_id}

    loop_ids = phase_ids | step_ids
    if main_thread is None and n:
        marked: dict[int, int] = {}
        outer: dict[int, float] = {}
        for k, t, p, d in zip(nid, th, parent, dur, strict=True):
            if k in loop_ids:
                marked[t] = marked.get(t, 0) + 1
            if p < 0:
                outer[t] = outer.get(t, 0.0) + d
        main_thread = max(marked, key=marked.get) if marked else max(outer, key=outer.get)
    # the main thread's window, busy time and loop ops in one pass, no index of its ops (8 bytes per op)
    first, last, busy, loop = None, None, 0.0, []
    for i, (s, d, t, p, k) in enumerate(zip(ts, dur, th, parent, nid, strict=True)):
        if t != main_thread:
            continue
        e = s + d
        first = s if first is None or s < first else first
        last = e if last is None or e > last else last
        if p < 0:
            busy += d
        if k in loop_ids:
            loop.append(i)
    window = (last - first) if first is not None else 0.0
    view = CpuView(
        ops=n,
        threads=len(set(th)),
        main_thread_window_us=window,
        main_thread_busy_us=busy,
        by_self=by_self,
        phases=phases,
        iterations=[],
    )
    if len(raw.k_ts) > 1:
        _gpu_idle(view, raw, ts, dur, nid, parent, main_thread, phase_ids)
    if len(raw.p_ts):
        view.by_source_op = _by_source(raw, child_dur, annot)
    # 12 bytes per op, given back before the loop passes' records are made
    del parent, child_dur
    view.iterations = _iterations(names, ts, dur, nid, loop)
    return view


def _by_source(raw: RawTrace, child_dur: array, annot: array) -> dict[tuple[str, str], float]:
    """Self time of each aten op credited to the Python frame it ran in (record_function ranges are left out:
    their self time is Python spread over many frames, not one line's)."""
    names = raw.names
    frame = innermost(raw, raw.o_ts, raw.o_thread)
    acc: dict[tuple[int, int], float] = {}
    for k, d, cd, a, f in zip(raw.o_name, raw.o_dur, child_dur, annot, frame, strict=True):
        if not a:
            acc[(f, k)] = acc.get((f, k), 0.0) + d - cd
    out: dict[tuple[str, str], float] = {}
    for (f, k), us in acc.items():
        key = (names[f] if f >= 0 else NO_FRAME, op_key(names[k]))
        out[key] = out.get(key, 0.0) + us
    return out


def _gpu_idle(view: CpuView, raw: RawTrace, ts, dur, nid, parent, main_thread, phase_ids: set[int]) -> None:
    """The launching thread's ops and phases inside the GPU's idle gaps (GPU traces only: numpy is loaded)."""
    import numpy as np

    k_ts = np.frombuffer(raw.k_ts, dtype=np.float64)
    gs, ge = gpu_gaps(k_ts, k_ts + np.frombuffer(raw.k_dur, dtype=np.float64))
    main = np.flatnonzero(ids(raw.o_thread) == main_thread)
    starts = np.frombuffer(ts, dtype=np.float64)[main]
    over_main = _covered(starts, starts + np.frombuffer(dur, dtype=np.float64)[main], gs, ge)
    over = np.zeros(len(ts))
    over[main] = over_main
    par = np.frombuffer(parent, dtype=parent.typecode).astype(np.int64)
    child = par >= 0
    self_over = over - np.bincount(par[child], weights=over[child], minlength=len(ts))
    names_idx = ids(nid)
    nn = max(len(raw.names), 1)
    view.gpu_idle_us = float((ge - gs).sum())
    view.idle_cpu_us = float(over[~child].sum())
    sums = np.bincount(names_idx, weights=np.maximum(self_over, 0.0), minlength=nn)
    view.idle_by_self = _grouped({int(i): float(sums[i]) for i in np.flatnonzero(sums)}, raw.names)
    ph = np.zeros(nn, dtype=bool)
    ph[list(phase_ids)] = True
    psums = np.bincount(names_idx, weights=over * ph[names_idx], minlength=nn)
    view.idle_by_phase = _grouped({int(i): float(psums[i]) for i in np.flatnonzero(psums)}, raw.names)


def _iterations(names: list[str], ts, dur, nid, loop: list[int]) -> list[dict]:
    """Scheduler loop passes: from one `scheduler.recv_requests` to the next, tagged with their step."""
    if not loop:
        return []
    order = sorted(loop, key=lambda i: ts[i])
    starts = [i for i in order if names[nid[i]] == ITERATION_START]
    if not starts:
        return []
    bounds = [ts[i] for i in starts] + [max(ts[i] + dur[i] for i in order)]
    out: list[dict] = []
    j = 0
    while j < len(order) and ts[order[j]] < bounds[0] - EPS_US:
        j += 1
    for k in range(len(starts)):
        lo, hi = bounds[k], bounds[k + 1]
        it = {"ts": lo, "us": hi - lo, "kind": None, "step": None, "phases": {}}
        while j < len(order) and ts[order[j]] < hi - EPS_US:
            name = names[nid[order[j]]]
            if STEP_RE.match(name):
                it["kind"], it["step"] = step_kind(name), name
            else:
                o = order[j]
                # end - start, as ever
                it["phases"][name] = it["phases"].get(name, 0.0) + ((ts[o] + dur[o]) - ts[o])
            j += 1
        # a pass that ran no batch is idle; one whose batch has no step marker (cut off when the
        # profiler stopped, or a release without markers) is kept apart rather than guessed
        it["kind"] = it["kind"] or ("unmarked" if "scheduler.run_batch" in it["phases"] else "idle")
        out.append(it)
    return out


def _add(into: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, list):
            cur = into.setdefault(k, [0] * len(v))
            for i, x in enumerate(v):
                # [3] is a flag (annotation), not a sum
                cur[i] = x if i == 3 else cur[i] + x
        else:
            into[k] = into.get(k, 0.0) + v


def median(values: list[float]) -> float | None:
    """The median (mean of the middle two for an even count), as statistics.median, without importing it."""
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


@dataclass
class CpuSummary:
    """The CPU view over all files (ranks summed; steps and loop passes kept per rank)."""

    ops: int
    # main threads' outermost ops, summed over ranks
    busy_us: float
    window_us: float
    # name -> [self us, count, total us, annotation flag]
    by_self: dict[str, list]
    # scheduler phase -> [us, count]
    phases: dict[str, list]
    iterations: list[dict]
    # from the breakdown: name, cpu_us, gpu_us, rank
    steps: list[dict]
    gpu_idle_us: float
    idle_cpu_us: float
    idle_by_phase: dict[str, float]
    idle_by_self: dict[str, float]
    # (Python frame, op) -> self us
    by_source_op: dict[tuple[str, str], float] = field(default_factory=dict)

    def top_self(self, n: int = 15) -> list[tuple[str, float, int, float, bool]]:
        """Ops by self time: (name, self us, calls, total us, is a record_function range)."""
        rows = sorted(self.by_self.items(), key=lambda kv: -kv[1][0])[:n]
        return [(k, v[0], v[1], v[2], bool(v[3])) for k, v in rows if v[0] > 0]

    def phase_rows(self) -> list[tuple[str, float, int]]:
        return [(k, v[0], v[1]) for k, v in sorted(self.phases.items(), key=lambda kv: -kv[1][0])]

    def step_types(self) -> list[dict]:
        """Per step kind (DECODE, EXTEND, ...): counts and medians of the step span, its loop pass and
        each scheduler phase in that pass."""
        kinds: dict[str, dict] = {}
        for s in self.steps:
            k = kinds.setdefault(step_kind(s["name"]), {"steps": [], "passes": [], "phases": {}})
            k["steps"].append(s["cpu_us"])
        for it in self.iterations:
            k = kinds.setdefault(it["kind"], {"steps": [], "passes": [], "phases": {}})
            k["passes"].append(it["us"])
            for name, us in it["phases"].items():
                k["phases"].setdefault(name, []).append(us)
        out = []
        for kind, k in kinds.items():
            n = max(len(k["steps"]), len(k["passes"]))
            out.append(
                {
                    "kind": kind,
                    "count": n,
                    "median_step_us": median(k["steps"]),
                    "median_pass_us": median(k["passes"]),
                    "median_phase_us": {
                        p: median(v + [0.0] * (len(k["passes"]) - len(v)))
                        for p, v in sorted(k["phases"].items())
                    },
                }
            )
        return sorted(out, key=lambda r: -(r["count"] * (r["median_pass_us"] or r["median_step_us"] or 0)))

    @property
    def self_total_us(self) -> float:
        """All CPU time the ops cover, on every thread (each instant counted once per thread)."""
        return sum(v[0] for v in self.by_self.values())

    def top_idle(self, n: int = 10) -> list[tuple[str, float]]:
        return sorted(((k, v) for k, v in self.idle_by_self.items() if v > 0), key=lambda kv: -kv[1])[:n]

    def verdict(self) -> list[str]:
        """One or two sentences a person reads first."""
        lines = []
        kinds = {r["kind"]: r for r in self.step_types()}
        for kind in ("DECODE", "EXTEND"):
            r = kinds.get(kind)
            if r and r["median_step_us"] is not None:
                lines.append(
                    f"{kind.lower()} step: median {r['median_step_us'] / 1000:.3f} ms of CPU "
                    f"({r['count']} steps)"
                    + (f", loop pass {r['median_pass_us'] / 1000:.3f} ms" if r["median_pass_us"] else "")
                )
        ops = [row for row in self.top_self(50) if not row[4]]
        if ops and self.self_total_us > 0:
            name, us, calls, _, _ = ops[0]
            lines.append(
                f"top CPU op by self time: {name}, {us / self.self_total_us:.0%} of the CPU time in ops "
                f"({calls} calls)"
            )
        if self.gpu_idle_us > 0:
            idle = self.top_idle(1)
            lines.append(
                f"while the GPU idles ({self.gpu_idle_us / 1000:.3f} ms), the launching thread is in an op "
                f"{self.idle_cpu_us / self.gpu_idle_us:.0%} of the time"
                + (f"; most in {idle[0][0]} ({idle[0][1] / self.gpu_idle_us:.0%})" if idle else "")
            )
        return lines

    def to_json(self) -> dict:
        def r3(v):
            return round(v, 3) if isinstance(v, float) else v

        total = self.self_total_us or 1.0
        return {
            "ops": self.ops,
            "busy_us": r3(self.busy_us),
            "window_us": r3(self.window_us),
            "verdict": self.verdict(),
            "step_types": [
                {
                    k: ({p: r3(u) for p, u in v.items()} if isinstance(v, dict) else r3(v))
                    for k, v in r.items()
                }
                for r in self.step_types()
            ],
            "phases": [
                {"name": n, "us": r3(us), "count": c, "share": round(us / total, 5)}
                for n, us, c in self.phase_rows()
            ],
            "top_self": [
                {
                    "name": n,
                    "self_us": r3(us),
                    "count": c,
                    "total_us": r3(t),
                    "annotation": a,
                    "share": round(us / total, 5),
                }
                for n, us, c, t, a in self.top_self(30)
            ],
            "gpu_idle": None
            if not self.gpu_idle_us
            else {
                "idle_us": r3(self.gpu_idle_us),
                "cpu_in_op_us": r3(self.idle_cpu_us),
                "by_phase": {k: r3(v) for k, v in sorted(self.idle_by_phase.items(), key=lambda kv: -kv[1])},
                "by_op_self": [
                    {"name": k, "us": r3(v), "share": round(v / self.gpu_idle_us, 5)}
                    for k, v in self.top_idle(15)
                ],
            },
            "iterations": len(self.iterations),
        }


def summarize(views: list[tuple[int | None, CpuView]], steps: list[dict]) -> CpuSummary:
    """Sum per-file views; loop passes keep their rank."""
    by_self: dict[str, list] = {}
    phases: dict[str, list] = {}
    idle_phase: dict[str, float] = {}
    idle_self: dict[str, float] = {}
    iterations = []
    by_source: dict[tuple[str, str], float] = {}
    for rank, v in views:
        _add(by_source, v.by_source_op)
        _add(by_self, v.by_self)
        _add(phases, v.phases)
        _add(idle_phase, v.idle_by_phase)
        _add(idle_self, v.idle_by_self)
        iterations += [{**it, "rank": rank} for it in v.iterations]
    return CpuSummary(
        ops=sum(v.ops for _, v in views),
        busy_us=sum(v.main_thread_busy_us for _, v in views),
        window_us=sum(v.main_thread_window_us for _, v in views),
        by_self=by_self,
        phases=phases,
        iterations=iterations,
        steps=steps,
        gpu_idle_us=sum(v.gpu_idle_us for _, v in views),
        idle_cpu_us=sum(v.idle_cpu_us for _, v in views),
        idle_by_phase=idle_phase,
        idle_by_self=idle_self,
        by_source_op=by_source,
    )
