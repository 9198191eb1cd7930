"""GPU telemetry beside a level's client figures: the host sampler's rows (sglops/host/telemetry.py) inside
the level's measuring windows, summarised over its GPUs. A host without GPUs says so (`absent`); a stand-in
nvidia-smi's rows are labelled `standin` wherever they show."""

from __future__ import annotations

from collections.abc import Sequence

from sglops.bench import stats

T, INDEX, SM, MEM, UTIL, POWER, USED = range(7)


def level(telemetry: dict | None, entries: Sequence[dict]) -> dict | None:
    """One level's GPU figures over its repeats' windows (each entry's `started` .. + `wall_s`), or None when
    nothing was sampled: {"gpus", "samples", "sm_clock_mhz", "mem_clock_mhz", "util_pct", "power_w",
    "memory_used_mib", "standin", "source"} (each figure median/min/max over the GPUs' samples)."""
    if not telemetry:
        return None
    if telemetry.get("absent"):
        return {"absent": telemetry["absent"]}
    windows = [(e["started"], e["started"] + e["wall_s"]) for e in entries if e.get("started") is not None]
    rows = [r for r in telemetry.get("samples") or [] if any(a <= r[T] <= b for a, b in windows)]
    if not rows:
        return {"samples": 0, "standin": telemetry.get("standin"), "source": telemetry.get("source")}

    def fig(col: int) -> dict | None:
        vals = [r[col] for r in rows if r[col] is not None]
        return {"median": stats.median(vals), "min": min(vals), "max": max(vals)} if vals else None

    return {
        "gpus": len({r[INDEX] for r in rows}),
        "samples": len(rows),
        "sm_clock_mhz": fig(SM),
        "mem_clock_mhz": fig(MEM),
        "util_pct": fig(UTIL),
        "power_w": fig(POWER),
        "memory_used_mib": fig(USED),
        "standin": telemetry.get("standin"),
        "source": telemetry.get("source"),
    }


def series(telemetry: dict | None) -> dict | None:
    """Per GPU index, the time series for a chart (seconds from the first sample)."""
    rows = (telemetry or {}).get("samples") or []
    if not rows:
        return None
    t0 = rows[0][T]
    out: dict[int, dict[str, list]] = {}
    for r in rows:
        s = out.setdefault(r[INDEX], {"t": [], "sm": [], "util": [], "power": []})
        s["t"].append(r[T] - t0)
        s["sm"].append(r[SM])
        s["util"].append(r[UTIL])
        s["power"].append(r[POWER])
    return {"t0": t0, "gpus": out}
