"""`inv duel`: the normalisation table, both sides' figures,
the limits the servers reported, the verdict line."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from sglops.experiment.duel import DuelResult


def duel_view(r: DuelResult) -> RenderableType:
    a, b = r.profiles
    norm = Table(title=f"duel on {r.host}: {a} ({r.engines[0]}) vs {b} ({r.engines[1]}): limits")
    for col in ("knob", a, f"{b} as asked", f"{b} as run", "how"):
        norm.add_column(col)
    for row in r.normalised:
        norm.add_row(*(str(row.get(k)) for k in ("knob", "a", "b", "run", "how")))
    parts: list[RenderableType] = [norm]
    if r.dry_run:
        return Group(*parts, Text("\n".join(f"would {p}" for p in r.plan)))
    sides = Table(title="sides")
    for col in (
        "engine",
        "version",
        "healthy after s",
        "decode tok/s",
        "TTFT ms",
        "TPOT ms",
        "confirmed args",
    ):
        sides.add_column(col)
    for s in r.sides:
        sides.add_row(
            s["engine"],
            str(s["version"]),
            f"{s['healthy_after_s'] or 0:.1f}",
            f"{s['decode_tok_s']['median']:.1f}",
            f"{s['ttft_ms']['median']:.1f}",
            f"{s['tpot_ms']['median']:.2f}",
            str(s["confirmed"]),
        )
    eff = Table(title="limits as each server reported them")
    for col in ("knob", r.engines[0], r.engines[1], "same"):
        eff.add_column(col)
    for row in r.effective:
        eff.add_row(row["knob"], str(row["a"]), str(row["b"]), str(row["same"]))
    parts += [sides, eff, Text(f"host: {r.restored}"), Text(r.verdict, style="bold")]
    return Group(*parts)
