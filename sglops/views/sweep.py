"""The views of an `inv sweep`: the plan of a dry run, else one table row per candidate, the recommendation,
the candidates ruled out before start with why, the wall-time split and how the host was left; the same as
markdown for `inv report` (sglops.views.report) and docs/sweep.md.

SweepResult (sglops.experiment.sweep_result) keeps data and JSON; tasks and plays print it through
sglops.views.show. A crash line, a top cost or a reason comes from the host (its log, a trace's kernel names):
every such string is shown with terminal control characters escaped (sglops.trace.names.printable), in the
terminal and in markdown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sglops.trace.names import printable
from sglops.views.bench import pareto_markdown

if TYPE_CHECKING:
    from sglops.experiment.sweep_result import Row, SweepResult

STYLE = {"started": "green", "skipped": "yellow", "crashed": "bold red", "bench failed": "red", "planned": ""}
COLUMNS = (
    "#",
    "candidate",
    "started / crash",
    "decode tok/s [95% CI]",
    "outputs vs baseline",
    "top cost",
    "run",
)


def outcome(r: Row) -> str:
    """The second column, with what `--force` ran past."""
    text = r.outcome()
    if r.forced:
        text = f"{text} (forced past: {'; '.join(r.reasons)})"
    return printable(text)


def cells(r: Row) -> list[str]:
    """One row's cells, in COLUMNS' order, control characters escaped."""
    return [
        str(r.candidate.index),
        printable(r.candidate.label),
        outcome(r),
        r.speed(),
        printable(r.outputs()),
        printable(r.top_cost or "-"),
        r.run_id or "-",
    ]


def skipped_lines(r: SweepResult) -> list[str]:
    """Each candidate ruled out before anything started, with its reasons (probe facts, render)."""
    return [printable(f"{x.candidate.label}: {'; '.join(x.reasons)}") for x in r.skipped()]


def title(r: SweepResult) -> str:
    gpu = f"sm{r.compute_capability.replace('.', '')}" if r.compute_capability else "no GPU"
    from sglops.experiment.server_nodes import where

    return printable(
        f"sweep on {where(r.host, r.nodes)}: profile {r.profile}, sglang {r.sglang_version or '?'}, {gpu}"
        + (f"  run {r.run_id}" if r.run_id else "")
    )


def sweep_view(r: SweepResult) -> Group:
    """`inv sweep`: the candidates with what ruled each
    out, then (after a run) speed, outputs and top cost."""
    if r.dry_run:
        t = Table(title=title(r) + " (dry run)", title_justify="left", show_header=False, box=None)
        for line in r.plan:
            t.add_row(Text("would", style="dim"), Text(printable(line)))
        notes = [
            Text(printable(f"  {row.candidate.label}: {n}"), style="dim") for row in r.rows for n in row.notes
        ]
        took = (
            [Text(printable(f"earlier: {r.earlier_line}; restored to its found state"), style="yellow")]
            if r.earlier_line
            else []
        )
        return Group(t, *notes, *took, Text(printable(r.recommendation()), style="bold"))
    t = Table(title=title(r), title_justify="left")
    for col in COLUMNS:
        t.add_column(
            col, overflow="fold", justify="right" if col in ("#", "decode tok/s [95% CI]") else "left"
        )
    for row in r.rows:
        c = cells(row)
        t.add_row(*[Text(x, style=STYLE.get(row.status, "")) if i == 2 else Text(x) for i, x in enumerate(c)])
    good = r.ok and bool(r.measured())
    lines: list[Any] = [t, Text(printable(r.recommendation()), style="bold green" if good else "bold red")]
    lines += [Text(f"skipped before start: {s}", style="yellow") for s in skipped_lines(r)]
    lines += [Text(printable(x), style="bold") for x in pareto_lines(r.pareto)]
    if r.earlier_line:
        lines.append(Text(printable(f"took over: {r.earlier_line}"), style="yellow"))
    if r.split:
        lines.append(Text(r.split_line(), style="dim"))
    if r.restore:
        lines.append(Text(printable(r.restore_line()), style="dim" if r.restore.get("ok") else "bold red"))
    if r.failure:
        lines.append(Text(printable(f"FAILED: {r.failure}"), style="bold red"))
    if r.folder:
        lines.append(
            Text(
                f"saved {r.folder}/sweep.json; each candidate's bench is a run of its own (inv compare, "
                "inv report)",
                style="dim",
            )
        )
    return Group(*lines)


def pareto_lines(par: dict | None) -> list[str]:
    """The frontier's line and its chart (sglops.bench.pareto)."""
    if not par or not par.get("points"):
        return []
    return [par["line"]] + ([f"Pareto chart: {par['chart']}"] if par.get("chart") else [])


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def sweep_markdown(r: SweepResult) -> str:
    """The table as markdown (docs/sweep.md keeps one from a real run), the recommendation and the split."""
    head = "| # | candidate | started / crash | decode tok/s [95% CI] | outputs vs baseline | top cost |\n"
    head += "| --- | --- | --- | --- | --- | --- |\n"
    body = "".join(
        f"| {c[0]} | `{c[1]}` | {_md(c[2])} | {c[3]} | {_md(c[4])} | {_md(c[5])} |\n"
        for c in map(cells, r.rows)
    )
    return head + body + f"\n{printable(r.recommendation())}\n\n{r.split_line()}\n"


def sweep_report(r: SweepResult, chart: str | None = None) -> list[str]:
    """`inv report` of a sweep run: the whole record as
    markdown lines (chart: the comparison's chart, relative)."""
    bench = ", ".join(f"{k} {v}" for k, v in sorted(r.bench.items())) or "the bench's defaults"
    out = [
        f"# {title(r)}",
        "",
        f"**{printable(r.recommendation())}**",
        "",
        "- bench per candidate (the same work for each): " + printable(bench),
        "- patches managed (applied/reverted per candidate, checked in the host ledger): "
        + (", ".join(f"`{p}`" for p in r.managed) or "none"),
    ]
    if r.force:
        out.append("- `--force`: candidates the probe facts rule out were run too")
    if r.split:
        out.append(f"- {r.split_line()}")
    out += ["", "## Candidates", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(_md(x) for x in cells(row)) + " |" for row in r.rows]
    out += ["", "## Skipped before start", ""] + ([f"- {_md(s)}" for s in skipped_lines(r)] or ["- none"])
    notes = [printable(f"{row.candidate.label}: {n}") for row in r.rows for n in row.notes]
    if notes:
        out += [
            "",
            "<details><summary>probe notes</summary>",
            "",
            *[f"- {_md(n)}" for n in notes],
            "",
            "</details>",
        ]
    if chart:
        out += ["", f"![decode tok/s per candidate]({chart})"]
    out += pareto_markdown(r.pareto)
    out += ["", "## Host afterwards", "", printable(r.restore_line())]
    if r.failure:
        out += ["", f"**FAILED**: {printable(r.failure)}"]
    out += [
        "",
        "<details><summary>plan</summary>",
        "",
        *[f"1. {printable(s)}" for s in r.plan],
        "",
        "</details>",
        "",
    ]
    return out
