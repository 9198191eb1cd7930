"""Views of a TraceAnalysis: rich table, markdown report, PNG bar chart of the top kernels."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from sglops.trace.analysis import TraceAnalysis


def _verdict(a: TraceAnalysis) -> list[str]:
    if a.findings:
        lines = []
        for f in a.findings:
            lines.append(f.message)
            lines += [f"  try: {t}" for t in f.try_next]
        return lines
    from sglops.trace.analysis import short_kernel

    top = a.top_kernels(1)
    if not top:
        return ["no GPU kernels to diagnose"]
    name, us, _ = top[0]
    return [f"no known bottleneck pattern above its threshold; the biggest kernel, {short_kernel(name)}, "
            f"takes {us / a.gpu_us:.0%} of GPU time"]


def _ranks(a: TraceAnalysis) -> str:
    ranks = sorted({f.rank for f in a.files if f.rank is not None})
    return f"{len(a.files)} file(s), " + (f"ranks {', '.join(map(str, ranks))}" if ranks else "rank not recorded")


def table(a: TraceAnalysis, top: int = 12) -> Group:
    from sglops.trace.analysis import short_kernel

    head = Text.assemble(
        ("trace analysis: ", "bold"), f"{_ranks(a)}; GPU time {a.gpu_us / 1000:.2f} ms summed over ranks; "
        f"GPU idle {a.idle_share:.0%} of its active window\n")
    for i, line in enumerate(_verdict(a)):
        head.append(("" if line.startswith("  ") else "=> ") + line + "\n",
                    style="dim" if line.startswith("  ") else ("bold red" if a.findings and i == 0 else "bold"))
    kt = Table(title="GPU time by kernel (summed over ranks)", title_justify="left")
    for col, just in (("kernel", "left"), ("ms", "right"), ("share", "right"), ("calls", "right")):
        kt.add_column(col, justify=just, overflow="fold")
    for name, us, n in a.top_kernels(top):
        kt.add_row(Text(short_kernel(name)), f"{us / 1000:.3f}", f"{us / a.gpu_us:.1%}", str(n))
    ot = Table(title="GPU time by launching CPU op (incl. nested ops, as torch's device_time_total)",
               title_justify="left")
    for col, just in (("op", "left"), ("ms", "right"), ("share", "right"), ("calls", "right")):
        ot.add_column(col, justify=just)
    for name, us, n in a.top_ops(top):
        ot.add_row(Text(name), f"{us / 1000:.3f}", f"{us / a.gpu_us:.1%}", str(n))
    parts = [head, kt, ot]
    steps = a.step_summary()
    if steps:
        st = Table(title="time per step (median)", title_justify="left")
        for col in ("step", "count", "CPU ms", "GPU ms", "GPU busy"):
            st.add_column(col, justify="left" if col == "step" else "right")
        for s in steps:
            busy = s["median_gpu_us"] / s["median_cpu_us"] if s["median_cpu_us"] else 0.0
            st.add_row(Text(s["name"]), str(s["count"]), f"{s['median_cpu_us'] / 1000:.3f}",
                       f"{s['median_gpu_us'] / 1000:.3f}", f"{busy:.0%}")
        parts.append(st)
    if len(a.files) > 1:
        rt = Table(title="per rank", title_justify="left")
        for col in ("rank", "file", "GPU ms", "idle", "kernels", "steps"):
            rt.add_column(col, justify="left" if col == "file" else "right")
        for f in a.files:
            rt.add_row(str(f.rank) if f.rank is not None else "?", Text(os.path.basename(f.path)),
                       f"{f.gpu_us / 1000:.3f}", f"{f.idle_share:.0%}", str(f.kernels), str(f.steps))
        parts.append(rt)
    for w in a.warnings:
        parts.append(Text(f"note: {w}", style="yellow"))
    return Group(*parts)


def markdown(a: TraceAnalysis, top: int = 15) -> str:
    """A report to paste into an issue or keep beside the traces."""
    from sglops.trace.analysis import short_kernel

    out = ["# Trace analysis", "", f"{_ranks(a)}. GPU time {a.gpu_us / 1000:.2f} ms summed over ranks; "
           f"GPU idle {a.idle_share:.0%} of its active window.", "", "## Verdict", ""]
    for line in _verdict(a):
        out.append(f"  - {line.strip()[5:]}" if line.startswith("  try:") else f"- **{line}**")
    out += ["", "## GPU time by kernel", "", "| kernel | ms | share | calls |", "|---|---:|---:|---:|"]
    for name, us, n in a.top_kernels(top):
        out.append(f"| `{short_kernel(name)}` | {us / 1000:.3f} | {us / a.gpu_us:.1%} | {n} |")
    out += ["", "## GPU time by launching CPU op (incl. nested ops)", "", "| op | ms | share | calls |",
            "|---|---:|---:|---:|"]
    for name, us, n in a.top_ops(top):
        out.append(f"| `{name}` | {us / 1000:.3f} | {us / a.gpu_us:.1%} | {n} |")
    steps = a.step_summary()
    if steps:
        out += ["", "## Time per step (median)", "", "| step | count | CPU ms | GPU ms |", "|---|---:|---:|---:|"]
        for s in steps:
            out.append(f"| `{s['name']}` | {s['count']} | {s['median_cpu_us'] / 1000:.3f} | "
                       f"{s['median_gpu_us'] / 1000:.3f} |")
    out += ["", "## Files", "", "| rank | file | GPU ms | idle | kernels |", "|---:|---|---:|---:|---:|"]
    for f in a.files:
        out.append(f"| {f.rank if f.rank is not None else '?'} | `{os.path.basename(f.path)}` | "
                   f"{f.gpu_us / 1000:.3f} | {f.idle_share:.0%} | {f.kernels} |")
    if a.warnings:
        out += ["", "## Notes", ""] + [f"- {w}" for w in a.warnings]
    return "\n".join(out) + "\n"


def chart(a: TraceAnalysis, path: str | os.PathLike, top: int = 15) -> Path:
    """Horizontal bars of the top kernels by GPU time (matplotlib, Agg: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sglops.trace.analysis import short_kernel

    rows = a.top_kernels(top)[::-1]
    fig, ax = plt.subplots(figsize=(10, 0.4 * max(len(rows), 3) + 1.2))
    shares = [us / a.gpu_us * 100 for _, us, _ in rows]
    ys = list(range(len(rows)))  # numeric positions: two kernels may share a short label
    ax.barh(ys, shares, color="#3b6ea8")
    ax.set_yticks(ys, [short_kernel(n)[:70] for n, _, _ in rows])
    ax.set_xlim(0, max(shares + [1]) * 1.15)
    for y, s in enumerate(shares):
        ax.text(s, y, f" {s:.1f}%", va="center", fontsize=8)
    ax.set_xlabel("share of GPU time (%)")
    ax.set_title(f"Top kernels by GPU time ({_ranks(a)})", fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path
