"""One analysis over one or more trace files (one per TP rank): per rank and summed over ranks."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sglops.core.result import Observation
from sglops.trace.breakdown import UNATTRIBUTED, Breakdown, breakdown, cpu_only_breakdown
from sglops.trace.cpu import CpuSummary, CpuView, cpu_view, median, summarize
from sglops.trace.names import short_kernel
from sglops.trace.parse import TraceError, read
from sglops.trace.sources import ProbeIndex
from sglops.trace.sources import rows as source_rows

if TYPE_CHECKING:
    from sglops.core.op import Draw
    from sglops.trace.diagnose import Finding

# (source line, kernel) pairs kept with their probe findings
SOURCE_ROWS = 10
SCOPE_LABELS = {"decode": "in decode steps", "steps": "in profiled steps", "all": "overall"}


@dataclass
class RankSummary:
    path: str
    rank: int | None
    stage: str | None
    gpu: str | None
    events: int
    kernels: int
    linked: int
    gpu_us: float
    idle_share: float
    steps: int
    # GPU activity, or on a CPU-only trace the launching thread's busy time
    busy_us: float = 0.0
    # of it, in collectives (NCCL/gloo all-reduce, all-gather, broadcast, barrier...)
    collective_us: float = 0.0

    def to_json(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass
class TraceAnalysis(Observation):
    """Everything `analyze-trace` reports; its table, markdown and chart are in sglops.views.trace."""

    files: list[RankSummary]
    gpu_us: float
    window_us: float
    idle_us: float
    by_kernel: dict[str, list]
    by_op: dict[str, list]
    by_gpu_span: dict[str, list]
    steps: list[dict]
    scope: str
    scope_gpu_us: float
    findings: list[Finding]
    cpu: CpuSummary | None = None
    warnings: list[str] = field(default_factory=list)
    # (launching op, kernel) -> us, in scope
    op_kernel: dict[tuple[str, str], float] = field(default_factory=dict)
    # the files `inv analyze-trace` kept (analysis.json, report.md, chart)
    report: dict | None = None
    # Python frames in the traces (0: taken without stacks)
    frames: int = 0
    # (frame, kernel or op) -> us
    source_pairs: dict[tuple[str, str], float] = field(default_factory=dict)
    # the top pairs with their probe findings and patches
    sources: list[dict] = field(default_factory=list)
    # the probe.json the source lines were joined with
    probe_source: str | None = None

    @property
    def source_total_us(self) -> float:
        """What the source shares are of: GPU time in the scope, or CPU self time of all ops (CPU-only)."""
        return self.scope_gpu_us if self.has_gpu else (self.cpu.self_total_us if self.cpu else 0.0)

    def source_verdict(self) -> list[str]:
        """One line per hot source line a probe flags: its share, the line, the finding, the patch."""
        from sglops.trace.names import short_kernel

        where = f"GPU time {SCOPE_LABELS[self.scope]}" if self.has_gpu else "CPU time in ops"
        out = []
        if self.sources and self.sources[0].get("graph"):
            r = self.sources[0]
            what = short_kernel(r["what"]) if self.has_gpu else r["what"]
            out.append(
                f"{r['share']:.1%} of {where} in {what} replayed from a CUDA graph at {r['label']}: the line "
                "that captured it is not in a replay's stack; profile with CUDA graphs off (a server profile "
                "with `cuda_graph: {disable: true}`) to see it"
            )
        for r in self.sources:
            if not r["probe"]:
                continue
            hit = next((h for h in r["probe"] if r["patches"]), r["probe"][0])
            what = short_kernel(r["what"]) if self.has_gpu else r["what"]
            out.append(
                f"{r['share']:.1%} of {where} in {what} launched at {r['label']} "
                f"(probe: {hit['meaning']}, L{hit['line']})"
                + (" -> " + ", ".join(f"inv apply-patch {p}" for p in r["patches"]) if r["patches"] else "")
            )
        return out

    @property
    def has_gpu(self) -> bool:
        return any(f.kernels for f in self.files)

    @property
    def idle_share(self) -> float:
        return self.idle_us / self.window_us if self.window_us > 0 else 0.0

    def top_kernels(self, n: int = 15) -> list[tuple[str, float, int]]:
        rows = sorted(self.by_kernel.items(), key=lambda kv: -kv[1][0])[:n]
        return [(k, us, c) for k, (us, c) in rows]

    def top_ops(self, n: int = 15) -> list[tuple[str, float, int]]:
        rows = sorted(((k, v) for k, v in self.by_op.items() if v[0] > 0), key=lambda kv: -kv[1][0])[:n]
        return [(k, us, c) for k, (us, c) in rows]

    def step_summary(self) -> list[dict]:
        """Steps grouped by name: count, median CPU and GPU time per step."""
        groups: dict[str, list[dict]] = {}
        for s in self.steps:
            key = "ProfilerStep#" if s["name"].startswith("ProfilerStep#") else s["name"]
            groups.setdefault(key, []).append(s)
        out = []
        for name, rows in groups.items():
            out.append(
                {
                    "name": name,
                    "count": len(rows),
                    "median_cpu_us": median([r["cpu_us"] for r in rows]),
                    "median_gpu_us": median([r["gpu_us"] for r in rows]),
                    "gpu_us": sum(r["gpu_us"] for r in rows),
                }
            )
        return sorted(out, key=lambda r: -r["gpu_us"])

    def payload(self) -> dict:
        def rows(d: dict) -> list[dict]:
            total = self.gpu_us or 1.0
            return [
                {"name": k, "us": round(v[0], 3), "count": v[1], "share": round(v[0] / total, 5)}
                for k, v in sorted(d.items(), key=lambda kv: -kv[1][0])
            ]

        return ({"report": self.report} if self.report is not None else {}) | {
            "files": [f.to_json() for f in self.files],
            "ranks": len({f.rank for f in self.files}),
            "across_ranks": across_ranks(self.files),
            "gpu_us": round(self.gpu_us, 3),
            "window_us": round(self.window_us, 3),
            "idle_share": round(self.idle_share, 4),
            "scope": self.scope,
            "scope_gpu_us": round(self.scope_gpu_us, 3),
            "findings": [f.to_json() for f in self.findings],
            "by_kernel": rows(self.by_kernel),
            "by_op": rows(self.by_op),
            "by_gpu_span": rows(self.by_gpu_span),
            "steps": [
                {**s, **{k: round(v, 3) for k, v in s.items() if isinstance(v, float)}}
                for s in self.step_summary()
            ],
            "gpu": self.has_gpu,
            "cpu": self.cpu.to_json() if self.cpu else None,
            "warnings": self.warnings,
            "stacks": {
                "frames": self.frames,
                "probe": self.probe_source,
                "verdict": self.source_verdict(),
                "top": [{**r, "us": round(r["us"], 3), "share": round(r["share"], 5)} for r in self.sources],
            },
        }


COLLECTIVE = re.compile(
    r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|barrier|c10d::|"
    r"gloo|record_param_comms|cross_device_reduce",
    re.I,
)


def across_ranks(files: list[RankSummary]) -> dict | None:
    """Over the ranks of one profile: each rank's busy time, the part it spent in collectives and its own work
    (busy minus collectives). The slowest rank is the one with the most own work: the others wait for it
    inside their collectives. spread: (slowest - fastest) / slowest own work."""
    rows = [f for f in files if f.rank is not None]
    if len({f.rank for f in rows}) < 2:
        return None
    by_rank: dict[int, list[float]] = {}
    for f in rows:
        cur = by_rank.setdefault(f.rank, [0.0, 0.0])
        cur[0] += f.busy_us
        cur[1] += f.collective_us
    own = {r: max(0.0, b - c) for r, (b, c) in by_rank.items()}
    slowest, fastest = max(own, key=own.get), min(own, key=own.get)
    return {
        "ranks": [
            {
                "rank": r,
                "busy_us": round(b, 3),
                "collective_us": round(c, 3),
                "own_us": round(own[r], 3),
                "collective_share": round(c / b, 4) if b else 0.0,
            }
            for r, (b, c) in sorted(by_rank.items())
        ],
        "slowest_rank": slowest,
        "fastest_rank": fastest,
        "spread": round((own[slowest] - own[fastest]) / own[slowest], 4) if own[slowest] else 0.0,
    }


def _add(into: dict, src: dict) -> None:
    for k, (us, c) in src.items():
        cur = into.setdefault(k, [0.0, 0])
        cur[0] += us
        cur[1] += c


def analyze(
    paths: Iterable[str | os.PathLike],
    rules_path: str | os.PathLike | None = None,
    probe: ProbeIndex | None = None,
) -> TraceAnalysis:
    """Parse each trace (one at a time, so memory stays per-file), sum over ranks, diagnose; with Python
    stacks, the source line of the top kernels (or CPU ops), joined with `probe`'s findings when given."""
    paths = [str(p) for p in paths]
    if not paths:
        raise TraceError("no trace files given")
    parts: list[Breakdown] = []
    views: list[tuple[int | None, CpuView]] = []
    for p in paths:
        raw = read(p)
        parts.append(breakdown(raw) if len(raw.k_ts) else cpu_only_breakdown(raw))
        views.append((raw.rank, cpu_view(raw, main_thread=_launching_thread(raw))))
        del raw
    warnings = []
    cpu_only = all(b.kernels == 0 for b in parts)
    for b in parts:
        if b.kernels == 0 and not cpu_only:
            warnings.append(f"{b.path}: no GPU events (kernels/memcpy) in this trace, unlike the other files")
        elif b.linked < b.kernels:
            warnings.append(
                f"{b.path}: {b.kernels - b.linked} of {b.kernels} GPU events have no launching CPU op "
                f"(CUDA graph replay or missing runtime events); counted under {UNATTRIBUTED}"
            )
    if cpu_only:
        warnings.append(
            "CPU-only trace: no GPU activity recorded (a host without a GPU, or the profile asked for "
            "CPU activity only); the CPU view is the analysis"
        )
    by_kernel: dict[str, list] = {}
    by_op: dict[str, list] = {}
    by_gpu_span: dict[str, list] = {}
    op_kernel: dict[str, dict] = {"all": {}, "steps": {}, "decode": {}}
    source_kernel: dict[str, dict] = {"all": {}, "steps": {}, "decode": {}}
    steps: list[dict] = []
    for b in parts:
        for scope, pairs in b.by_source_kernel.items():
            tgt = source_kernel[scope]
            for key, us in pairs.items():
                tgt[key] = tgt.get(key, 0.0) + us
        _add(by_kernel, b.by_kernel)
        _add(by_op, b.by_op)
        _add(by_gpu_span, b.by_gpu_span)
        for scope, pairs in b.by_op_kernel.items():
            tgt = op_kernel[scope]
            for key, us in pairs.items():
                tgt[key] = tgt.get(key, 0.0) + us
        steps += [{**s, "rank": b.rank} for s in b.steps]
    scope = "decode" if op_kernel["decode"] else ("steps" if op_kernel["steps"] else "all")
    scope_us = sum(op_kernel[scope].values())
    gpu_us = sum(b.gpu_us for b in parts)
    window = sum(b.window_us for b in parts)
    idle = sum(b.idle_us for b in parts)
    facts = {
        "op_kernel": op_kernel[scope],
        "scope_gpu_us": scope_us,
        "scope_label": SCOPE_LABELS[scope],
        "window_us": window,
        "idle_us": idle,
    }
    findings = [] if cpu_only else _diagnose(facts, rules_path)
    files = [
        RankSummary(
            path=b.path,
            rank=b.rank,
            stage=b.stage,
            gpu=b.gpu_name,
            events=b.events,
            kernels=b.kernels,
            linked=b.linked,
            gpu_us=b.gpu_us,
            idle_share=(b.idle_us / b.window_us if b.window_us > 0 else 0.0),
            steps=len(b.steps),
            **_rank_time(b, v, cpu_only),
        )
        for b, (_r, v) in zip(parts, views, strict=True)
    ]
    files.sort(key=lambda f: (f.rank is None, f.rank or 0, f.stage or ""))
    frames = sum(b.frames for b in parts)
    a = TraceAnalysis(
        files=files,
        gpu_us=gpu_us,
        window_us=window,
        idle_us=idle,
        by_kernel=by_kernel,
        by_op=by_op,
        by_gpu_span=by_gpu_span,
        steps=steps,
        scope=scope,
        scope_gpu_us=scope_us,
        findings=findings,
        cpu=summarize(views, steps),
        warnings=warnings,
        op_kernel=op_kernel[scope],
        frames=frames,
    )
    if frames:
        a.source_pairs = source_kernel[scope] if not cpu_only else (a.cpu.by_source_op if a.cpu else {})
        a.sources = source_rows(a.source_pairs, a.source_total_us, SOURCE_ROWS, probe)
        a.probe_source = probe.source if probe else None
    return a


def _rank_time(b: Breakdown, v: CpuView, cpu_only: bool) -> dict:
    """One file's busy time and its part in collectives: GPU kernels on a GPU trace, else the CPU ops' self
    time on the launching thread (a gloo all-reduce that waits for a slower rank is self time of its op)."""
    if not cpu_only:
        return {
            "busy_us": b.gpu_us,
            "collective_us": sum(us for name, (us, _c) in b.by_kernel.items() if COLLECTIVE.search(name)),
        }
    return {
        "busy_us": v.main_thread_busy_us,
        "collective_us": sum(row[0] for name, row in v.by_self.items() if COLLECTIVE.search(name)),
    }


def _diagnose(facts: dict, rules_path: str | os.PathLike | None) -> list[Finding]:
    """The GPU rules (playbooks/diagnosis.yaml); imported here, as a CPU-only trace never needs them."""
    from sglops.trace.diagnose import diagnose, load_rules

    return diagnose(facts, load_rules(rules_path) if rules_path else load_rules(), short_kernel)


def _launching_thread(raw) -> int | None:
    """The thread that launched most kernels (the one whose CPU time can keep the GPU waiting)."""
    if not len(raw.l_thread):
        return None
    counts: dict[int, int] = {}
    for t in raw.l_thread:
        counts[t] = counts.get(t, 0) + 1
    return max(counts, key=counts.get)


def expand_paths(spec: str | Iterable[str]) -> list[str]:
    """Trace files from a comma-separated list, folders (their *.json / *.json.gz) and globs."""
    import glob

    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        p = Path(item).expanduser()
        if p.is_dir():
            found = sorted(
                str(f) for f in p.iterdir() if f.is_file() and re.search(r"\.json(\.gz)?$", f.name)
            )
            if not found:
                raise TraceError(f"{p}: no *.json or *.json.gz trace files in this folder")
            out += found
        elif any(ch in item for ch in "*?["):
            found = sorted(glob.glob(str(p)))
            if not found:
                raise TraceError(f"{item}: no file matches")
            out += found
        else:
            out.append(str(p))
    if not out:
        raise TraceError("no trace files given")
    return out


def save_report(
    a: TraceAnalysis,
    folder: str | os.PathLike,
    *,
    markdown: bool = True,
    chart: bool = False,
    draw: Draw | None = None,
) -> dict[str, str]:
    """analysis.json always; report.md and the PNG chart (top kernels, or top CPU ops on a CPU-only
    trace) only when asked and drawn by `draw` (the views a runner hands down): drawing costs more than
    analysing a small trace. Returns their paths."""
    from sglops.core import artifacts
    from sglops.core.op import Chart, Page

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": str(artifacts.write_json(folder / "analysis.json", a.to_json()))}
    if markdown and draw is not None:
        paths["markdown"] = str(draw(Page(a), folder / "report.md"))
    if chart and draw is not None and (a.by_kernel or (a.cpu and a.cpu.by_self)):
        paths["chart"] = str(draw(Chart(a), folder / ("top_kernels.png" if a.has_gpu else "top_cpu_ops.png")))
    return paths


def analyze_to(
    files: str | Iterable[str],
    out: str | os.PathLike | None = None,
    *,
    markdown: bool = True,
    chart: bool = False,
    run_id: str | None = None,
    draw: Draw | None = None,
    probe: str | None = None,
) -> tuple[TraceAnalysis, dict]:
    """`inv analyze-trace`: analyse, then keep the report under out (default artifacts/local/<run>/).
    probe: a probe.json (file, folder or run id) to join source lines with; by default, for traces `inv
    profile` kept, the host's newest probe record of the same SGLang version."""
    from sglops.core import artifacts
    from sglops.core.op import handed_down
    from sglops.trace.sources import beside, load, probe_file

    paths = expand_paths(files)
    found = probe_file(probe) if probe else beside(paths)
    a = analyze(paths, probe=load(found) if found else None)
    folder = Path(out) if out else artifacts.run_dir("local", handed_down(run_id)) / "trace-analysis"
    return a, save_report(a, folder, markdown=markdown, chart=chart, draw=draw)
