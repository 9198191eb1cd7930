"""The view of an `inv ab` run: its plan on a dry run, else the rounds, the verdict and how the host was left.

AbResult (sglops.experiment.ab_result) keeps data and
JSON; tasks and plays print it through sglops.views.show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from sglops.experiment.ab_result import AbResult


def ab_table(r: AbResult) -> Group:
    """`inv ab`: the plan of a dry run, or the rounds with
    the verdict, trace diff, restore and where it is kept."""
    from sglops.experiment.server_nodes import where

    title = (
        f"ab on {where(r.host, r.nodes)}: A = {r.a.name}, B = {r.b.name}, {r.rounds_asked} round(s) ABAB"
        + (f"  run {r.run_id}" if r.run_id else "")
    )
    if r.dry_run:
        t = Table(title=title + " (dry run)", title_justify="left", show_header=False, box=None)
        for s in r.plan:
            t.add_row(Text("would", style="dim"), Text(s.line()))
        took = (
            [Text(f"earlier: {r.earlier_line}; restored to its found state", style="yellow")]
            if r.earlier_line
            else []
        )
        return Group(t, *took, Text(f"found: {r.found_line()}", style="dim"), Text(r.verdict(), style="bold"))
    t = Table(title=title, title_justify="left")
    for col in ("round", "side", "run", "status", "decode tok/s", "patches (ledger)"):
        t.add_column(col, justify="right" if col in ("round", "decode tok/s") else "left")
    for rd in r.rounds:
        t.add_row(
            str(rd.round),
            rd.side,
            rd.run_id or "-",
            Text(rd.status, style="green" if rd.status == "ok" else "bold red"),
            f"{rd.decode_tok_s:.2f}" if rd.decode_tok_s else "-",
            "+".join(rd.patches) or "none",
        )
    good = r.ok and r.identical is not False and not r.unintended
    lines: list[Any] = [t, Text(r.verdict(), style="bold green" if good else "bold red")]
    if r.trace_diff:
        lines.append(Text(f"trace diff (A -> B): {r.trace_diff.get('headline')}"))
    if r.earlier_line:
        lines.append(Text(f"took over: {r.earlier_line}", style="yellow"))
    restore = r.restore or {}
    if restore:
        lines.append(
            Text(
                ("host restored: " if restore.get("ok") else "HOST NOT RESTORED: ")
                + (restore.get("error") or r.found_line()),
                style="dim" if restore.get("ok") else "bold red",
            )
        )
    if r.folder:
        lines.append(
            Text(f"saved {r.folder}/ab.json" + (f", chart {r.chart}" if r.chart else ""), style="dim")
        )
    return Group(*lines)
