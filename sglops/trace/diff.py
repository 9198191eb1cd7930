"""`inv diff-trace A B`: what changed between two profiles, per step, kernel, launching op and CPU phase.

Why: after a patch the question is not "what is slow" but "what got faster, what got slower, and by how much
per step": "decode step 58.4 -> 17.2 ms: -41.0 ms unrolled_elementwise_kernel (aten::copy_), +0.4 ms
gather_cast". Both sides come from the single-trace analysis (`analyze`), so every side's totals are exactly
what `inv analyze-trace` reports for it; the diff only normalises them to one step of the scope (decode steps
where the traces have them) so two profiles of different lengths compare, and ranks the deltas by absolute
change.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from sglops.core.result import Observation
from sglops.trace.analysis import TraceAnalysis, across_ranks, analyze
from sglops.trace.cpu import step_kind
from sglops.trace.names import short_kernel
from sglops.trace.stacks import parse_frame

UNIT_STEP = "per step"
UNIT_TRACE = "per trace"


@dataclass
class Delta:
    """One row: a name, its time on each side (us, normalised), and where it came from."""

    name: str
    a_us: float
    b_us: float
    # e.g. the op that launched a kernel
    detail: str = ""

    @property
    def delta_us(self) -> float:
        return self.b_us - self.a_us

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "a_us": round(self.a_us, 3),
            "b_us": round(self.b_us, 3),
            "delta_us": round(self.delta_us, 3),
            "detail": self.detail,
        }


@dataclass
class Side:
    """What one trace set contributes: the analysis and how many steps its totals are divided by."""

    label: str
    analysis: TraceAnalysis
    # steps of the scope (over ranks); 0: totals are per trace
    steps: int
    # DECODE, EXTEND, ProfilerStep, ... or "" when there are no steps
    step_kind: str

    @property
    def per(self) -> float:
        return float(self.steps) if self.steps else 1.0


@dataclass
class TraceDiff(Observation):
    a: Side
    b: Side
    unit: str
    # median step time per step kind (GPU, else CPU)
    steps: list[Delta] = field(default_factory=list)
    # GPU time per kernel
    kernels: list[Delta] = field(default_factory=list)
    # GPU time per launching (innermost) op
    ops: list[Delta] = field(default_factory=list)
    # CPU time per scheduler phase, per loop pass of the kind
    phases: list[Delta] = field(default_factory=list)
    # CPU self time per op, per scheduler loop pass
    cpu_ops: list[Delta] = field(default_factory=list)
    # per SGLang function (file, function): GPU time per step
    sources: list[Delta] = field(default_factory=list)
    #                                                       (CPU self time per loop pass
    #                                                       on CPU traces); stacks only
    # per rank when both sides have the same ranks (>= 2)
    ranks: list[dict] = field(default_factory=list)

    def headline(self, top: int = 3) -> str:
        """One line: the scope's step time and the biggest movers, e.g. the kernel that went away."""
        head = ""
        step = next((s for s in self.steps if step_kind(s.name) == self.a.step_kind), None) or (
            self.steps[0] if self.steps else None
        )
        if step:
            what = "GPU" if self.a.analysis.has_gpu else "CPU"
            head = f"{step.name} {what} time {_ms(step.a_us)} -> {_ms(step.b_us)} ms"
        movers = self.kernels if self.a.analysis.has_gpu or self.b.analysis.has_gpu else self.cpu_ops
        parts = [
            f"{_signed_ms(d.delta_us)} ms {short_kernel(d.name)}" + (f" ({d.detail})" if d.detail else "")
            for d in movers[:top]
            if abs(d.delta_us) > 0
        ]
        return (head + (": " if head and parts else "") + ", ".join(parts)) or "no difference"

    def payload(self) -> dict:
        return {
            "a": {
                "label": self.a.label,
                "steps": self.a.steps,
                "step_kind": self.a.step_kind,
                "gpu_us": round(self.a.analysis.gpu_us, 3),
            },
            "b": {
                "label": self.b.label,
                "steps": self.b.steps,
                "step_kind": self.b.step_kind,
                "gpu_us": round(self.b.analysis.gpu_us, 3),
            },
            "unit": self.unit,
            "headline": self.headline(),
            "steps": [d.to_json() for d in self.steps],
            "kernels": [d.to_json() for d in self.kernels],
            "ops": [d.to_json() for d in self.ops],
            "phases": [d.to_json() for d in self.phases],
            "cpu_ops": [d.to_json() for d in self.cpu_ops],
            "sources": [d.to_json() for d in self.sources],
            "ranks": self.ranks,
        }


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}" if abs(us) < 10_000 else f"{us / 1000:.1f}"


def _signed_ms(us: float) -> str:
    return ("+" if us > 0 else "") + _ms(us)


def _scope_steps(a: TraceAnalysis) -> tuple[int, str]:
    """(number of steps of the busiest kind, that kind): decode steps where there are any."""
    kinds: dict[str, int] = {}
    for s in a.steps:
        k = step_kind(s["name"])
        kinds[k] = kinds.get(k, 0) + 1
    if not kinds:
        return 0, ""
    if "DECODE" in kinds:
        return kinds["DECODE"], "DECODE"
    kind = max(kinds, key=lambda k: kinds[k])
    return kinds[kind], kind


def _ranked(a: dict[str, float], b: dict[str, float], detail: dict[str, str] | None = None) -> list[Delta]:
    names = set(a) | set(b)
    rows = [Delta(n, a.get(n, 0.0), b.get(n, 0.0), (detail or {}).get(n, "")) for n in names]
    return sorted(rows, key=lambda d: (-abs(d.delta_us), d.name))


def _launching_ops(*analyses: TraceAnalysis) -> dict[str, str]:
    """kernel -> the op that launched most of its time (either side)."""
    best: dict[str, tuple[float, str]] = {}
    for an in analyses:
        for (op, kernel), us in (an.op_kernel or {}).items():
            if us > best.get(kernel, (0.0, ""))[0]:
                best[kernel] = (us, op)
    return {k: op for k, (_, op) in best.items()}


def _step_medians(a: TraceAnalysis) -> dict[str, float]:
    use_gpu = a.has_gpu
    return {s["name"]: (s["median_gpu_us"] if use_gpu else s["median_cpu_us"]) for s in a.step_summary()}


def _phases(a: TraceAnalysis, side: Side) -> dict[str, float]:
    """CPU time per scheduler phase in one loop pass of the scope's step kind (per trace: all passes)."""
    if not a.cpu:
        return {}
    its = [it for it in a.cpu.iterations if not side.steps or it.get("kind") == side.step_kind]
    out: dict[str, float] = {}
    for it in its:
        for name, us in it["phases"].items():
            out[name] = out.get(name, 0.0) + us
    n = len(its) if side.steps else 1
    return {k: v / max(n, 1) for k, v in out.items()}


def _cpu_self(a: TraceAnalysis) -> dict[str, float]:
    """CPU self time per op in one scheduler loop pass (all kinds: ops are not split by step)."""
    if not a.cpu:
        return {}
    n = max(len(a.cpu.iterations), 1)
    return {name: us / n for name, us, _c, _t, _ann in a.cpu.top_self(10_000)}


def _scoped(a: TraceAnalysis, side: Side, by: int) -> dict[str, float]:
    """GPU time per kernel (by=1) or launching op (by=0) inside the scope's steps, per step.

    The scope is the one the single-trace analysis diagnoses (decode steps where there are any), so the sums
    are its `scope_gpu_us`; without (op, kernel) pairs it falls back to the whole trace's totals."""
    if not a.op_kernel:
        table = a.by_kernel if by == 1 else {k: v for k, v in a.by_op.items() if v[0] > 0}
        return {k: v[0] / side.per for k, v in table.items()}
    out: dict[str, float] = {}
    for pair, us in a.op_kernel.items():
        out[pair[by]] = out.get(pair[by], 0.0) + us
    return {k: v / side.per for k, v in out.items()}


def diff(a: TraceAnalysis, b: TraceAnalysis, *, labels: tuple[str, str] = ("A", "B")) -> TraceDiff:
    """The two analyses side by side, normalised to one step of the scope when both have steps."""
    (na, ka), (nb, kb) = _scope_steps(a), _scope_steps(b)
    per_step = bool(na and nb)
    sa = Side(labels[0], a, na if per_step else 0, ka)
    sb = Side(labels[1], b, nb if per_step else 0, kb)
    out = TraceDiff(sa, sb, UNIT_STEP if per_step else UNIT_TRACE)
    out.steps = _ranked(_step_medians(a), _step_medians(b))
    out.kernels = _ranked(_scoped(a, sa, 1), _scoped(b, sb, 1), _launching_ops(a, b))
    out.ops = _ranked(_scoped(a, sa, 0), _scoped(b, sb, 0))
    out.phases = _ranked(_phases(a, sa), _phases(b, sb))
    out.cpu_ops = _ranked(_cpu_self(a), _cpu_self(b))
    out.sources = _source_deltas(a, sa, b, sb)
    return out


def _by_function(an: TraceAnalysis, side: Side) -> tuple[dict[str, float], dict[str, set], dict[str, dict]]:
    """Per function (`file (function)`): time per step (GPU) or per loop pass (CPU), the lines torch gave its
    frames, and its time per kernel/op. Keyed by function, not line: a patch that adds lines above a function
    moves its first line, and the row must still pair up."""
    if an.has_gpu:
        per = side.per
    else:
        per = float(max(len(an.cpu.iterations), 1)) if an.cpu else 1.0
    us: dict[str, float] = {}
    lines: dict[str, set] = {}
    what: dict[str, dict] = {}
    for (frame_name, kernel), t in an.source_pairs.items():
        f = parse_frame(frame_name)
        key = f"{f.file} ({f.func})" if f else frame_name
        us[key] = us.get(key, 0.0) + t / per
        if f:
            lines.setdefault(key, set()).add(f.line)
        w = what.setdefault(key, {})
        w[kernel] = w.get(kernel, 0.0) + t / per
    return us, lines, what


def _source_deltas(a: TraceAnalysis, sa: Side, b: TraceAnalysis, sb: Side) -> list[Delta]:
    """Per-source-line rows when both sides carry Python stacks; the detail names the lines and the kernel
    (or op) that moved most."""
    if not (a.frames and b.frames):
        return []
    (ua, la, wa), (ub, lb, wb) = _by_function(a, sa), _by_function(b, sb)
    rows = _ranked(ua, ub)
    for d in rows:
        ka, kb = wa.get(d.name, {}), wb.get(d.name, {})
        moved = max(sorted(set(ka) | set(kb)), key=lambda k: abs(kb.get(k, 0.0) - ka.get(k, 0.0)))
        file, _, func = d.name.rpartition(" (")
        lines = "->".join(dict.fromkeys(f"{min(x)}" for x in (la.get(d.name), lb.get(d.name)) if x))
        label = f"{file.rsplit('/', 1)[-1]}:{lines} ({func}" if file else d.name
        d.detail = f"{label}: {short_kernel(moved) if (a.has_gpu or b.has_gpu) else moved}"
    return rows


def diff_files(
    a_files: Iterable[str | os.PathLike],
    b_files: Iterable[str | os.PathLike],
    labels: tuple[str, str] = ("A", "B"),
) -> TraceDiff:
    """The two sides over all their ranks, and, where both profiled the same ranks (two or more), each rank's
    own diff: a change that moves one rank (the slowest, which the others wait for) shows there and not in the
    sum."""
    a, b = analyze(a_files), analyze(b_files)
    out = diff(a, b, labels=labels)
    out.ranks = per_rank(a, b, labels)
    return out


def _rank_files(an: TraceAnalysis) -> dict[int, list[str]]:
    files: dict[int, list[str]] = {}
    for f in an.files:
        if f.rank is not None:
            files.setdefault(f.rank, []).append(f.path)
    return files


def per_rank(a: TraceAnalysis, b: TraceAnalysis, labels: tuple[str, str]) -> list[dict]:
    """Each rank's diff (its step time, its own work outside collectives, the biggest movers) when both sides
    have the same two or more ranks; [] otherwise."""
    fa, fb = _rank_files(a), _rank_files(b)
    if len(fa) < 2 or sorted(fa) != sorted(fb):
        return []
    own = {
        side: {r["rank"]: r for r in ((across_ranks(an.files) or {}).get("ranks") or [])}
        for side, an in (("a", a), ("b", b))
    }
    rows = []
    for rank in sorted(fa):
        d = diff(analyze(fa[rank]), analyze(fb[rank]), labels=labels)
        oa, ob = own["a"].get(rank, {}), own["b"].get(rank, {})
        rows.append(
            {
                "rank": rank,
                "headline": d.headline(),
                "steps": [s.to_json() for s in d.steps[:3]],
                "own_us": [oa.get("own_us"), ob.get("own_us")],
                "collective_us": [oa.get("collective_us"), ob.get("collective_us")],
                "top": [m.to_json() for m in (d.kernels if d.a.analysis.has_gpu else d.cpu_ops)[:5]],
            }
        )
    return rows


def side_files(spec: str) -> tuple[list[str], str]:
    """(trace files, label) for one side: a profile run id (its traces/), a folder, files or a glob."""
    from pathlib import Path

    from sglops.core import artifacts
    from sglops.core.errors import SglopsError
    from sglops.trace.analysis import expand_paths

    if not Path(spec).exists() and not any(ch in spec for ch in "*?[,"):
        try:
            run = artifacts.find_run(spec)
        except SglopsError:
            run = None
        if run is not None and (run / "traces").is_dir():
            return expand_paths(str(run / "traces")), run.name
    files = expand_paths(spec)
    label = Path(files[0]).name.split(".")[0] if len(files) == 1 else Path(files[0]).parent.name or spec
    return files, label


def diff_specs(a: str, b: str) -> TraceDiff:
    """`inv diff-trace A B`: each side a run id, folder, files or glob."""
    (fa, la), (fb, lb) = side_files(a), side_files(b)
    if la == lb:
        la, lb = f"A: {la}", f"B: {lb}"
    return diff_files(fa, fb, labels=(la, lb))
