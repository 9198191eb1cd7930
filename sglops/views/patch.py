"""Views of patch results: one apply/revert (with its diff on a dry run), the patch list of a host, a capture.

PatchResult, PatchList (sglops.patch.apply) and Capture (sglops.patch.capture) keep data and JSON; tasks and
plays print them through sglops.views.show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from sglops.patch.apply import recovered_line, recovery_note

if TYPE_CHECKING:
    from sglops.patch.apply import PatchList, PatchResult
    from sglops.patch.capture import Capture


def patch_table(res: PatchResult) -> RenderableType:
    """`inv apply-patch` / revert-patch: the action, variant,
    files, notes, recovery and the diff on a dry run."""
    t = Table(title=f"{res.patch} on {res.host}: {res.action}", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("variant", f"{res.variant or '-'}" + (f" ({res.how})" if res.how else ""))
    t.add_row("files", "\n".join(res.files) or "-")
    t.add_row("changed", "yes" if res.changed else "no")
    for n in res.notes:
        t.add_row("note", n)
    if res.recovered:
        t.add_row("recovered", Text(recovered_line(res.recovered)))
    if res.recovery_needed:
        t.add_row("recovery", Text(recovery_note(res.recovery_needed)))
    if res.diff:
        return Group(t, Syntax(res.diff, "diff", theme="ansi_dark", word_wrap=True))
    return t


def patch_list_table(pl: PatchList) -> Table:
    """`inv patches`: each patch's status on the host, with any cut-short transaction in the caption."""
    colors = {
        "gone": "red",
        "applied": "green",
        "applicable": "cyan",
        "available": "yellow",
        "drifted": "red",
        "conflicting": "red",
    }
    t = Table(
        title=f"patches on {pl.host} (sglang {pl.sglang})",
        title_justify="left",
        caption=_caption(pl),
        caption_justify="left",
    )
    for c in ("patch", "status", "variant", "detail"):
        t.add_column(c)
    for r in pl.rows:
        t.add_row(r.patch, Text(r.status, style=colors.get(r.status, "")), r.variant or "-", r.detail)
    return t


def _caption(pl: PatchList) -> Text | None:
    """A transaction cut short, and an ab in progress or
    cut short (its journal on the host), one line each."""
    from sglops.experiment.ab_journal import state_line

    lines = [recovery_note(pl.recovery_needed)] if pl.recovery_needed else []
    if pl.ab:
        lines.append(state_line(pl.ab, pl.ab.get("live")))
    return Text("\n".join(lines)) if lines else None


def capture_view(cap: Capture) -> Group:
    """`inv capture-patch`: the files captured, what was written (nothing on a dry run) and the diff."""
    t = Table(
        title=f"capture {cap.patch}/{cap.variant} from {cap.host} (vs {cap.against})",
        show_header=False,
        title_justify="left",
    )
    t.add_column(style="bold")
    t.add_column()
    t.add_row("files", "\n".join(cap.files))
    t.add_row("written", "\n".join(cap.written) or "nothing (dry run)")
    return Group(t, Syntax(cap.diff, "diff", theme="ansi_dark", word_wrap=True))
