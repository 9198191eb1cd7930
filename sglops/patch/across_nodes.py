"""A patch on the nodes of one server: on all of them or on none, and a node whose patches differ named.

Why: every node of a multi-node server runs the same code; a patch on node 0 alone is a server whose ranks
disagree (at best a crash at warm-up, at worst silently different numerics). Each node keeps its own ledger
and does its own transaction; the nodes then meet (sglops.core.meet): if any node failed, every node that
changed takes its change back, and each node's line names the node that failed and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sglops.core.errors import SglopsError
from sglops.core.meet import Meeting, one_server
from sglops.patch.apply import PatchList, PatchRefused, PatchResult


def all_or_none(
    ctx: Any, what: str, do: Callable[[], PatchResult], undo: Callable[[PatchResult], Any]
) -> PatchResult:
    """do() on this node; on the nodes of one server, undone
    here (undo(result)) unless every node succeeded."""
    if ctx.dry_run or not one_server(ctx.peers):
        return do()
    names = [h.name for h in ctx.peers]
    meeting = Meeting.of(ctx.run_id, what, names)
    res: PatchResult | None = None
    try:
        res = do()
        mine = {"ok": True, "changed": res.changed}
    except SglopsError as exc:
        mine = {"ok": False, "error": str(exc)}
    except BaseException:
        meeting.leave(ctx.remote.name)
        raise
    every = meeting.gather("done", ctx.remote.name, mine)
    failed = sorted(n for n, o in every.items() if not o["ok"])
    if not failed:
        if res.changed:
            res.notes.append(f"on every node of the server ({', '.join(names)})")
        return res
    first = failed[0]
    why = every[first]["error"]
    # this node is one that failed: its own error, and that the others were taken back
    if res is None:
        raise PatchRefused(f"{why} (every other node of the server was taken back)")
    taken_back = ""
    if res.changed:
        undo(res)
        taken_back = "; taken back here"
    raise PatchRefused(
        f"{ctx.remote.name}: {what} on none of the nodes ({', '.join(names)}): node {first} failed: "
        f"{why}{taken_back}"
    )


def compared(ctx: Any, mine: PatchList) -> PatchList:
    """On the nodes of one server: each patch whose state on this node is not the other nodes' is named."""
    if not one_server(ctx.peers):
        return mine
    every = Meeting.of(ctx.run_id, "patches", [h.name for h in ctx.peers]).gather(
        "status", ctx.remote.name, {r.patch: (r.status, r.variant) for r in mine.rows}
    )
    rows = []
    for row in mine.rows:
        others = {n: v.get(row.patch) for n, v in every.items() if n != ctx.remote.name}
        differ = {n: s for n, s in others.items() if s != (row.status, row.variant)}
        if differ:
            said = ", ".join(
                f"{n}: {s[0] if s else 'unknown'}" + (f" ({s[1]})" if s and s[1] else "")
                for n, s in sorted(differ.items())
            )
            row = replace(
                row,
                detail=f"{row.detail}; DIFFERS from other nodes ({said}): `inv restart` of the "
                "server refuses until every node matches",
            )
        rows.append(row)
    mine.rows = rows
    mine.differs = any("DIFFERS from other nodes" in r.detail for r in rows)
    return mine
