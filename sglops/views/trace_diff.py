"""Views of a TraceDiff: rich tables for the terminal, markdown for reports. Names from traces are data."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sglops.trace.names import cell, full_names_markdown, printable, short_kernel

if TYPE_CHECKING:
    from sglops.trace.diff import Delta, TraceDiff

SECTIONS = (
    ("steps", "median step time", "step"),
    ("kernels", "GPU time by kernel", "kernel"),
    ("ops", "GPU time by launching op", "op"),
    ("phases", "CPU time by scheduler phase", "phase"),
    ("cpu_ops", "CPU self time by op, per scheduler loop pass", "op"),
    ("sources", "time by SGLang function (innermost frame of each kernel or op; Python stacks)", "function"),
)


def _us(v: float, signed: bool = False) -> str:
    text = f"{v / 1000:,.3f} ms" if abs(v) >= 1000 else f"{v:,.1f} us"
    return ("+" if signed and v > 0 else "") + text


def _name(section: str, d: Delta) -> Text:
    # `unquant.py:572 (apply): aten::mm`: the line(s) and what moved most there
    if section == "sources":
        return Text(cell(d.detail or d.name))
    name = short_kernel(d.name) if section == "kernels" else cell(d.name)
    return Text(printable(name + (f"  ({cell(d.detail)})" if d.detail else "")))


def tables(diff: TraceDiff, top: int = 12) -> Group:
    parts: list = [Text(printable(diff.headline()), style="bold")]
    unit = (
        f"{diff.unit} ({diff.a.step_kind or 'trace'}: {diff.a.steps} vs {diff.b.steps} steps)"
        if diff.unit == "per step"
        else diff.unit
    )
    for key, title, col in SECTIONS:
        rows = [d for d in getattr(diff, key) if d.a_us or d.b_us][:top]
        if not rows:
            continue
        how = {"steps": "median", "cpu_ops": "all kinds"}.get(key, unit)
        if key == "sources" and not (diff.a.analysis.has_gpu or diff.b.analysis.has_gpu):
            how = "CPU self time per scheduler loop pass"
        t = Table(
            title=Text(cell(f"{title}, {how}: {diff.a.label} -> {diff.b.label}", 400)), title_justify="left"
        )
        for i, c in enumerate((col, diff.a.label, diff.b.label, "change")):
            t.add_column(Text(cell(c)), justify="left" if i == 0 else "right")
        for d in rows:
            style = "green" if d.delta_us < 0 else ("red" if d.delta_us > 0 else "")
            t.add_row(
                _name(key, d), _us(d.a_us), _us(d.b_us), Text(_us(d.delta_us, signed=True), style=style)
            )
        parts.append(t)
    if diff.ranks:
        parts.append(rank_table(diff))
    return Group(*parts)


def _pair(v: list, i: int) -> float | None:
    return v[i] if v and len(v) > i else None


def rank_table(diff: TraceDiff) -> Table:
    """Each rank's own diff: its work outside collectives, its time in them, its biggest mover."""
    t = Table(title=Text(cell(f"per rank: {diff.a.label} -> {diff.b.label}", 400)), title_justify="left")
    for c in ("rank", "own work", "in collectives", "step and biggest movers"):
        t.add_column(c, justify="right" if c != "step and biggest movers" else "left")
    for r in diff.ranks:
        own, coll = r.get("own_us") or [], r.get("collective_us") or []
        cells = [
            f"{_us(a)} -> {_us(b)}" if a is not None and b is not None else "-"
            for a, b in ((_pair(own, 0), _pair(own, 1)), (_pair(coll, 0), _pair(coll, 1)))
        ]
        t.add_row(str(r["rank"]), *cells, Text(printable(cell(r.get("headline") or "", 200))))
    return t


def markdown(diff: TraceDiff, top: int = 15) -> str:
    lines = [f"## Trace diff: {diff.a.label} -> {diff.b.label}", "", f"**{diff.headline()}**", ""]
    sep = "\n"
    for key, title, col in SECTIONS:
        rows = [d for d in getattr(diff, key) if d.a_us or d.b_us][:top]
        if not rows:
            continue
        lines += [
            f"### {title} ({diff.unit if key != 'steps' else 'median'})",
            "",
            f"| {col} | {diff.a.label} | {diff.b.label} | change |",
            "| --- | ---: | ---: | ---: |",
        ]
        for d in rows:
            name = str(_name(key, d)).replace("|", "\\|")
            lines.append(f"| `{name}` | {_us(d.a_us)} | {_us(d.b_us)} | {_us(d.delta_us, signed=True)} |")
        if key == "kernels":
            lines += full_names_markdown([d.name for d in rows])
        lines.append("")
    if diff.ranks:
        lines += [
            "### per rank",
            "",
            "| rank | own work | in collectives | step and biggest movers |",
            "| ---: | ---: | ---: | --- |",
        ]
        for r in diff.ranks:
            own, coll = r.get("own_us") or [None, None], r.get("collective_us") or [None, None]
            lines.append(
                f"| {r['rank']} | {_us(own[0] or 0)} -> {_us(own[1] or 0)} | {_us(coll[0] or 0)} -> "
                f"{_us(coll[1] or 0)} | {str(r.get('headline') or '').replace('|', '/')} |"
            )
        lines.append("")
    return sep.join(printable(line) for line in lines)
