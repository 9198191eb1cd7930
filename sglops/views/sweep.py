"""The view of an `inv sweep`: the plan of a dry run, else one table row per candidate and the recommendation.

SweepResult (sglops.bench.sweep_result) keeps data and JSON; tasks and plays print it through sglops.views.show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from sglops.bench.sweep_result import Row, SweepResult

STYLE = {"started": "green", "skipped": "yellow", "crashed": "bold red", "bench failed": "red", "planned": ""}


def _outcome(r: Row) -> Text:
    text = r.outcome()
    if r.forced:
        text = f"{text} (forced past: {'; '.join(r.reasons)})"
    return Text(text, style=STYLE.get(r.status, ""))


def sweep_view(r: SweepResult) -> Group:
    """`inv sweep`: the candidates with what ruled each out, then (after a run) speed, outputs and top cost."""
    gpu = f"sm{r.compute_capability.replace('.', '')}" if r.compute_capability else "no GPU"
    title = (f"sweep on {r.host}: profile {r.profile}, sglang {r.sglang_version or '?'}, {gpu}"
             + (f"  run {r.run_id}" if r.run_id else ""))
    if r.dry_run:
        t = Table(title=title + " (dry run)", title_justify="left", show_header=False, box=None)
        for line in r.plan:
            t.add_row(Text("would", style="dim"), Text(line))
        notes = [Text(f"  {row.candidate.label}: {n}", style="dim") for row in r.rows for n in row.notes]
        return Group(t, *notes, Text(r.recommendation(), style="bold"))
    t = Table(title=title, title_justify="left")
    for col in ("#", "candidate", "started / crash", "decode tok/s [95% CI]", "outputs vs baseline", "top cost",
                "run"):
        t.add_column(col, overflow="fold", justify="right" if col in ("#", "decode tok/s [95% CI]") else "left")
    for row in r.rows:
        t.add_row(str(row.candidate.index), row.candidate.label, _outcome(row), row.speed(), row.outputs(),
                  row.top_cost or "-", row.run_id or "-")
    good = r.ok and bool(r.measured())
    lines: list[Any] = [t, Text(r.recommendation(), style="bold green" if good else "bold red")]
    if r.split:
        lines.append(Text(r.split_line(), style="dim"))
    restore = r.restore or {}
    if restore:
        lines.append(Text(("host restored: " + str(restore.get("server") or "")) if restore.get("ok")
                          else f"HOST NOT RESTORED: {restore.get('error')}",
                          style="dim" if restore.get("ok") else "bold red"))
    if r.failure:
        lines.append(Text(f"FAILED: {r.failure}", style="bold red"))
    if r.folder:
        lines.append(Text(f"saved {r.folder}/sweep.json; each candidate's bench is a run of its own (inv compare, "
                          "inv report)", style="dim"))
    return Group(*lines)


def sweep_markdown(r: SweepResult) -> str:
    """The table as markdown (docs/sweep.md keeps one from a real run)."""
    head = "| # | candidate | started / crash | decode tok/s [95% CI] | outputs vs baseline | top cost |\n"
    head += "| --- | --- | --- | --- | --- | --- |\n"
    body = "".join(f"| {x.candidate.index} | `{x.candidate.label}` | {x.outcome().replace('|', '/')} | {x.speed()} | "
                   f"{x.outputs()} | {(x.top_cost or '-').replace('|', '/')} |\n" for x in r.rows)
    return head + body + f"\n{r.recommendation()}\n\n{r.split_line()}\n"
