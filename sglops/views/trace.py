"""Views of a TraceAnalysis (rich table, markdown report,
PNG bar chart of the top kernels) and of a profile run.

The analysis itself (sglops.trace.analysis) keeps data and JSON only; tasks and plays print through
sglops.views.show."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from sglops.trace.analysis import TraceAnalysis
    from sglops.trace.profile import ProfileResult

# characters of a chart's bar label; names are cut at a word boundary (sglops.trace.names)
CHART_LABEL = 60


def _verdict(a: TraceAnalysis) -> list[str]:
    """The sentences a person reads first, terminal controls from trace names escaped."""
    from sglops.trace.names import printable

    return [printable(line) for line in _verdict_lines(a)]


def _verdict_lines(a: TraceAnalysis) -> list[str]:
    if a.findings:
        lines = []
        for f in a.findings:
            lines.append(f.message)
            lines += [f"  try: {t}" for t in f.try_next]
        return lines + a.source_verdict()
    from sglops.trace.names import short_kernel

    top = a.top_kernels(1)
    if not top:
        return ((a.cpu.verdict() if a.cpu else []) + a.source_verdict()) or [
            "no GPU kernels and no CPU ops to analyse"
        ]
    name, us, _ = top[0]
    return [
        (
            f"no known bottleneck pattern above its threshold; the biggest kernel, {short_kernel(name)}, "
            f"takes {us / a.gpu_us:.0%} of GPU time"
        ),
        *a.source_verdict(),
    ]


def _ranks(a: TraceAnalysis) -> str:
    ranks = sorted({f.rank for f in a.files if f.rank is not None})
    return f"{len(a.files)} file(s), " + (
        f"ranks {', '.join(map(str, ranks))}" if ranks else "rank not recorded"
    )


def table(a: TraceAnalysis, top: int = 12) -> Group:
    from sglops.trace.names import cell, printable, short_kernel

    head = Text.assemble(("trace analysis: ", "bold"), _headline(a) + "\n")
    for i, line in enumerate(_verdict(a)):
        head.append(
            ("" if line.startswith("  ") else "=> ") + line + "\n",
            style="dim" if line.startswith("  ") else ("bold red" if a.findings and i == 0 else "bold"),
        )
    if not a.has_gpu:
        return Group(head, *_source_table(a), *_cpu_tables(a, top), *_rank_and_notes(a))
    kt = Table(title="GPU time by kernel (summed over ranks)", title_justify="left")
    for col, just in (("kernel", "left"), ("ms", "right"), ("share", "right"), ("calls", "right")):
        kt.add_column(col, justify=just, overflow="fold")
    for name, us, n in a.top_kernels(top):
        kt.add_row(Text(printable(short_kernel(name))), f"{us / 1000:.3f}", f"{us / a.gpu_us:.1%}", str(n))
    ot = Table(
        title="GPU time by launching CPU op (incl. nested ops, as torch's device_time_total)",
        title_justify="left",
    )
    for col, just in (("op", "left"), ("ms", "right"), ("share", "right"), ("calls", "right")):
        ot.add_column(col, justify=just)
    for name, us, n in a.top_ops(top):
        ot.add_row(Text(cell(name)), f"{us / 1000:.3f}", f"{us / a.gpu_us:.1%}", str(n))
    parts = [head, kt, ot, *_source_table(a)]
    steps = a.step_summary()
    if steps:
        st = Table(title="time per step (median)", title_justify="left")
        for col in ("step", "count", "CPU ms", "GPU ms", "GPU busy"):
            st.add_column(col, justify="left" if col == "step" else "right")
        for s in steps:
            busy = s["median_gpu_us"] / s["median_cpu_us"] if s["median_cpu_us"] else 0.0
            st.add_row(
                Text(cell(s["name"])),
                str(s["count"]),
                f"{s['median_cpu_us'] / 1000:.3f}",
                f"{s['median_gpu_us'] / 1000:.3f}",
                f"{busy:.0%}",
            )
        parts.append(st)
    if a.cpu and a.cpu.gpu_idle_us > 0:
        for line in a.cpu.verdict()[-1:]:
            parts.append(Text("CPU side: " + printable(line), style="bold"))
        parts += _cpu_tables(a, top)
    return Group(*parts, *_rank_and_notes(a))


def _headline(a: TraceAnalysis) -> str:
    if a.has_gpu:
        return (
            f"{_ranks(a)}; GPU time {a.gpu_us / 1000:.2f} ms summed over ranks; "
            f"GPU idle {a.idle_share:.0%} of its active window"
        )
    cpu = a.cpu
    return (
        f"{_ranks(a)}; CPU only: {cpu.ops if cpu else 0} CPU ops, {cpu.window_us / 1000 if cpu else 0:.2f} ms"
        " on the scheduler thread"
    )


def _table(title: str, cols: list[str], rows: list[list]) -> Table:
    from sglops.trace.names import cell

    t = Table(title=Text(title), title_justify="left")
    for i, col in enumerate(cols):
        t.add_column(Text(cell(col)), justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        t.add_row(*[Text(cell(str(c))) for c in row])
    return t


def _source_table(a: TraceAnalysis) -> list:
    """The top (source line, kernel) pairs: the innermost SGLang frame that launched each, and what the probe
    says of it. Without Python stacks, one line saying how to get them."""
    from sglops.trace.names import short_kernel

    if not a.frames:
        return [
            Text(
                "source lines: none (no Python stacks in this trace; take it with inv profile --stack)",
                style="dim",
            )
        ]
    what = "kernel" if a.has_gpu else "op"
    where = "GPU time in the scope" if a.has_gpu else "CPU self time"
    rows = [
        [
            short_kernel(r["what"]) if a.has_gpu else r["what"],
            f"{r['us'] / 1000:.3f}",
            f"{r['share']:.1%}",
            r["label"],
            _probe_cell(r),
        ]
        for r in a.sources
    ]
    return [
        _table(
            f"source lines: the innermost SGLang frame of each {what} ({where}; a frame's line is its "
            "function's first line)" + (f"; probe: {a.probe_source}" if a.probe_source else ""),
            [what, "ms", "share", "source", "probe"],
            rows,
        )
    ]


def _probe_cell(r: dict) -> str:
    if not r["probe"]:
        return "-"
    h = r["probe"][0]
    more = f" (+{len(r['probe']) - 1})" if len(r["probe"]) > 1 else ""
    return f"L{h['line']} {h['meaning']}{more}" + (" -> " + ", ".join(r["patches"]) if r["patches"] else "")


def _cpu_tables(a: TraceAnalysis, top: int) -> list:
    """Step kinds, scheduler phases, top ops by self time; on GPU traces, what the CPU does in GPU gaps."""
    cpu = a.cpu
    if cpu is None:
        return []
    out = []
    total = cpu.self_total_us or 1.0
    if cpu.gpu_idle_us > 0:
        rows = [[n, f"{us / 1000:.3f}", f"{us / cpu.gpu_idle_us:.1%}"] for n, us in cpu.top_idle(top)]
        rows.append(
            [
                "(no op on the launching thread)",
                f"{(cpu.gpu_idle_us - cpu.idle_cpu_us) / 1000:.3f}",
                f"{1 - cpu.idle_cpu_us / cpu.gpu_idle_us:.1%}",
            ]
        )
        rows += [
            [f"phase {n}", f"{us / 1000:.3f}", f"{us / cpu.gpu_idle_us:.1%}"]
            for n, us in sorted(cpu.idle_by_phase.items(), key=lambda kv: -kv[1])
            if us > 0
        ]
        out.append(
            _table(
                "while the GPU idles: CPU self time by op on the launching thread",
                ["op", "ms", "share of GPU idle"],
                rows,
            )
        )
    kinds = cpu.step_types()
    phase_names = sorted({p for r in kinds for p in r["median_phase_us"]})
    if kinds:

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v / 1000:.3f}"

        rows = [
            [
                r["kind"],
                r["count"],
                ms(r["median_step_us"]),
                ms(r["median_pass_us"]),
                *[ms(r["median_phase_us"].get(p)) for p in phase_names],
            ]
            for r in kinds
        ]
        out.append(
            _table(
                "CPU time per step kind (median ms; a loop pass runs from one scheduler.recv_requests "
                "to the next)",
                ["kind", "count", "step", "loop pass", *[p.replace("scheduler.", "") for p in phase_names]],
                rows,
            )
        )
    if cpu.phases:
        out.append(
            _table(
                "scheduler phases (CPU, inclusive; run_batch holds the step and copy_result_to_cpu)",
                ["phase", "ms", "share", "calls"],
                [[n, f"{us / 1000:.3f}", f"{us / total:.1%}", c] for n, us, c in cpu.phase_rows()],
            )
        )
    out.append(
        _table(
            "top CPU ops by self time",
            ["op", "self ms", "share", "calls", "total ms"],
            [
                [
                    n + (" (range)" if ann else ""),
                    f"{us / 1000:.3f}",
                    f"{us / total:.1%}",
                    c,
                    f"{t / 1000:.3f}",
                ]
                for n, us, c, t, ann in cpu.top_self(top)
            ],
        )
    )
    return out


def _rank_and_notes(a: TraceAnalysis) -> list:
    from sglops.trace.names import cell

    parts: list = []
    if len(a.files) > 1:
        rt = Table(title="per rank", title_justify="left")
        for col in ("rank", "file", "GPU ms", "idle", "kernels", "steps", "busy ms", "collectives"):
            rt.add_column(col, justify="left" if col == "file" else "right")
        for f in a.files:
            rt.add_row(
                str(f.rank) if f.rank is not None else "?",
                Text(cell(os.path.basename(f.path))),
                f"{f.gpu_us / 1000:.3f}",
                f"{f.idle_share:.0%}",
                str(f.kernels),
                str(f.steps),
                f"{f.busy_us / 1000:.3f}",
                f"{f.collective_us / f.busy_us:.0%}" if f.busy_us else "-",
            )
        parts.append(rt)
        line = across_line(a)
        if line:
            parts.append(Text(line))
    for w in a.warnings:
        parts.append(Text(f"note: {cell(w, 1000)}", style="yellow"))
    return parts


def markdown(a: TraceAnalysis, top: int = 15) -> str:
    """A report to paste into an issue or keep beside the traces (kernel names shortened, in full below)."""
    from sglops.trace.names import full_names_markdown, printable, short_kernel

    out = ["# Trace analysis", "", _headline(a) + ".", "", "## Verdict", ""]
    for line in _verdict(a):
        out.append(f"  - {line.strip()[5:]}" if line.startswith("  try:") else f"- **{line}**")
    if not a.has_gpu:
        out += _source_markdown(a) + _cpu_markdown(a, top) + _files_markdown(a)
        return "\n".join(printable(line) for line in out) + "\n"
    out += ["", "## GPU time by kernel", "", "| kernel | ms | share | calls |", "|---|---:|---:|---:|"]
    for name, us, n in a.top_kernels(top):
        out.append(f"| `{short_kernel(name)}` | {us / 1000:.3f} | {us / a.gpu_us:.1%} | {n} |")
    out += full_names_markdown([name for name, _, _ in a.top_kernels(top)])
    out += [
        "",
        "## GPU time by launching CPU op (incl. nested ops)",
        "",
        "| op | ms | share | calls |",
        "|---|---:|---:|---:|",
    ]
    for name, us, n in a.top_ops(top):
        out.append(f"| `{name}` | {us / 1000:.3f} | {us / a.gpu_us:.1%} | {n} |")
    steps = a.step_summary()
    if steps:
        out += [
            "",
            "## Time per step (median)",
            "",
            "| step | count | CPU ms | GPU ms |",
            "|---|---:|---:|---:|",
        ]
        for s in steps:
            out.append(
                f"| `{s['name']}` | {s['count']} | {s['median_cpu_us'] / 1000:.3f} | "
                f"{s['median_gpu_us'] / 1000:.3f} |"
            )
    out += _source_markdown(a)
    if a.cpu and a.cpu.gpu_idle_us > 0:
        out += _cpu_markdown(a, top)
    return "\n".join(printable(line) for line in out + _files_markdown(a)) + "\n"


def _source_markdown(a: TraceAnalysis) -> list[str]:
    from sglops.trace.names import short_kernel

    if not a.frames:
        return [
            "",
            "## Source lines",
            "",
            "No Python stacks in this trace (take it with `inv profile --stack`).",
        ]
    what = "kernel" if a.has_gpu else "op"
    return [
        "",
        "## Source lines (innermost SGLang frame; a frame's line is its function's first line)",
        "",
        *([f"Probe findings from `{a.probe_source}`.", ""] if a.probe_source else []),
        *_md_table(
            [what, "ms", "share", "source", "probe"],
            [
                [
                    f"`{short_kernel(r['what']) if a.has_gpu else r['what']}`",
                    f"{r['us'] / 1000:.3f}",
                    f"{r['share']:.1%}",
                    f"`{r['label']}`",
                    _probe_cell(r),
                ]
                for r in a.sources
            ],
        ),
    ]


def _md_table(header: list[str], rows: list[list]) -> list[str]:
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    return [
        "| " + " | ".join(header) + " |",
        "|---" + "|---:" * (len(header) - 1) + "|",
        *["| " + " | ".join(cell(c) for c in row) + " |" for row in rows],
    ]


def _cpu_markdown(a: TraceAnalysis, top: int) -> list[str]:
    cpu = a.cpu
    if cpu is None:
        return []
    out = ["", "## CPU side", ""] + ([f"- {line}" for line in cpu.verdict()] if a.has_gpu else [])
    total = cpu.self_total_us or 1.0

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v / 1000:.3f}"

    if cpu.gpu_idle_us > 0:
        rows = [[f"`{n}`", ms(us), f"{us / cpu.gpu_idle_us:.1%}"] for n, us in cpu.top_idle(top)]
        rows.append(
            [
                "(no op on the launching thread)",
                ms(cpu.gpu_idle_us - cpu.idle_cpu_us),
                f"{1 - cpu.idle_cpu_us / cpu.gpu_idle_us:.1%}",
            ]
        )
        out += [
            "",
            "### While the GPU idles (CPU self time on the launching thread)",
            "",
            *_md_table(["op", "ms", "share of GPU idle"], rows),
        ]
    kinds = cpu.step_types()
    if kinds:
        phases = sorted({p for r in kinds for p in r["median_phase_us"]})
        out += [
            "",
            "### CPU time per step kind (median ms)",
            "",
            *_md_table(
                ["kind", "count", "step", "loop pass", *[f"`{p}`" for p in phases]],
                [
                    [
                        r["kind"],
                        r["count"],
                        ms(r["median_step_us"]),
                        ms(r["median_pass_us"]),
                        *[ms(r["median_phase_us"].get(p)) for p in phases],
                    ]
                    for r in kinds
                ],
            ),
        ]
    if cpu.phases:
        out += [
            "",
            "### Scheduler phases (inclusive)",
            "",
            *_md_table(
                ["phase", "ms", "share", "calls"],
                [[f"`{n}`", ms(us), f"{us / total:.1%}", c] for n, us, c in cpu.phase_rows()],
            ),
        ]
    out += [
        "",
        "### Top CPU ops by self time",
        "",
        *_md_table(
            ["op", "self ms", "share", "calls", "total ms"],
            [
                [f"`{n}`" + (" (range)" if ann else ""), ms(us), f"{us / total:.1%}", c, ms(t)]
                for n, us, c, t, ann in cpu.top_self(top)
            ],
        ),
    ]
    return out


def across_line(a: TraceAnalysis) -> str | None:
    """`across ranks: slowest rank 1 (112.6 ms of its own work,
    45% ...); rank 0 waits for it (60% ...); spread 25%`."""
    from sglops.trace.analysis import across_ranks

    x = across_ranks(a.files)
    if not x:
        return None
    slow = next(r for r in x["ranks"] if r["rank"] == x["slowest_rank"])
    fast = next(r for r in x["ranks"] if r["rank"] == x["fastest_rank"])
    return (
        f"across ranks: slowest rank {x['slowest_rank']} ({slow['own_us'] / 1000:.3f} ms of its own work,"
        f" {slow['collective_share']:.0%} of its busy time in collectives); rank {x['fastest_rank']} waits"
        f" for it ({fast['collective_share']:.0%} in collectives); spread {x['spread']:.0%}"
    )


def _files_markdown(a: TraceAnalysis) -> list[str]:
    out = [
        "",
        "## Files",
        "",
        "| rank | stage | file | GPU ms | idle | kernels | busy ms | in collectives |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for f in a.files:
        out.append(
            f"| {f.rank if f.rank is not None else '?'} | {f.stage or '-'} | `{os.path.basename(f.path)}` | "
            f"{f.gpu_us / 1000:.3f} | {f.idle_share:.0%} | {f.kernels} | {f.busy_us / 1000:.3f} | "
            + (f"{f.collective_us / f.busy_us:.0%} |" if f.busy_us else "- |")
        )
    line = across_line(a)
    if line:
        out += ["", line]
    if a.warnings:
        out += ["", "## Notes", ""] + [f"- {w}" for w in a.warnings]
    return out


def chart(a: TraceAnalysis, path: str | os.PathLike, top: int = 15) -> Path:
    """Horizontal bars: the top kernels by GPU time, or on a CPU-only trace the top CPU ops by self time
    (matplotlib, imported only here, Agg: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sglops.trace.names import short_kernel, shorten

    # labels cut at a word boundary; the report's table and analysis.json keep the full names
    if a.has_gpu:
        rows = [(short_kernel(n, CHART_LABEL), us / a.gpu_us * 100) for n, us, _ in a.top_kernels(top)][::-1]
        xlabel, title = "share of GPU time (%)", f"Top kernels by GPU time ({_ranks(a)})"
    else:
        total = (a.cpu.self_total_us if a.cpu else 0) or 1.0
        rows = [
            (shorten(n, CHART_LABEL), us / total * 100)
            for n, us, *_ in (a.cpu.top_self(top) if a.cpu else [])
        ][::-1]
        xlabel, title = "share of CPU time in ops, self (%)", f"Top CPU ops by self time ({_ranks(a)})"
    fig, ax = plt.subplots(figsize=(10, 0.4 * max(len(rows), 3) + 1.2))
    shares = [v for _, v in rows]
    # numeric positions: two rows may share a short label
    ys = list(range(len(rows)))
    ax.barh(ys, shares, color="#3b6ea8")
    ax.set_yticks(ys, [label for label, _ in rows])
    ax.set_xlim(0, max(shares + [1]) * 1.15)
    for y, v in enumerate(shares):
        ax.text(v, y, f" {v:.1f}%", va="center", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from sglops.views.charts import save_figure

    return save_figure(fig, path, dpi=110)


def profile_table(p: ProfileResult) -> Group:
    """`inv profile`: where the traces came from and went, then the analysis table."""
    head = Text.assemble(
        ("profile ", "bold"),
        f"{p.host}:{p.port} ({p.port_from}), {p.steps} steps, "
        f"{len(p.traces)} trace file(s) -> {p.folder}/traces "
        + (f"[{', '.join(p.request.get('activities') or [])}] " if p.request else "")
        + f"(decode {p.decode_s:.1f} s, files ready after {p.waited_s:.1f} s, download {p.download_s:.1f} s)",
    )
    if p.standin:
        head.append("\n(stand-in server: synthetic traces, not GPU data)", style="yellow")
    # kept although the analysis failed: the traces are there, the error line follows
    if p.analysis is None:
        return Group(head, Text(f"not analysed: {p.error}", style="bold red"))
    return Group(head, table(p.analysis), Text(f"report: {p.report.get('markdown')}", style="dim"))


def show_analysis(a: TraceAnalysis) -> None:
    """`inv analyze-trace`: the tables, then where the report was kept (stderr)."""
    from sglops.core.console import console, note

    console.print(table(a))
    saved = a.report or {}
    note(f"report: {saved.get('markdown')}" + (f", chart: {saved['chart']}" if "chart" in saved else ""))
