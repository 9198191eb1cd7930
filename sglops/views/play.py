"""Views of play results: the recap table of a play run and a measuring step's dry-run line.

PlayResult (sglops.play.result) and Planned (sglops.core.result) keep data and JSON; the play runner and tasks
print them through sglops.views.show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from sglops.core.result import Planned
    from sglops.play.result import PlayResult


def planned_view(p: Planned) -> Table:
    """A measuring step's dry run: one dim `would` and what it would do."""
    t = Table(show_header=False, box=None)
    t.add_row(Text("would", style="dim"), p.what)
    return t


def play_table(pr: PlayResult) -> Table:
    """`inv play`: each step with what it does, its status, time, and its error or summary."""
    title = f"play {pr.play} on {pr.host}" + (" (dry run)" if pr.dry_run else "") + f" - run {pr.run_id}"
    t = Table(title=title, title_justify="left")
    for col in ("step", "does", "status", "time", "result"):
        t.add_column(col)
    style = {"ok": "green", "failed": "bold red", "skipped": "dim", "reused": "cyan"}
    for s in pr.steps:
        t.add_row(
            s.id,
            s.do,
            Text(s.status, style=style[s.status]),
            f"{s.seconds:.1f}s" if s.seconds else "",
            s.error or s.summary,
        )
    return t
