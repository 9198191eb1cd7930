"""A sweep's curve and its knee: per level the total output rate against the per-stream decode rate and TPOT.

The knee is named by one rule, so two sweeps are named alike: the lowest load whose total output tok/s reaches
KNEE_SHARE of the sweep's peak. Past it, more load buys little throughput and costs latency; the line says how
much (TPOT p50 there against the lowest load's).
"""

from __future__ import annotations

from collections.abc import Sequence

KNEE_SHARE = 0.9


def points(levels: Sequence[dict]) -> list[dict]:
    """One point per level that has figures (levels as in bench.json), in load order."""
    out = []
    for lv in levels:
        total = (lv.get("output_tok_s") or {}).get("median")
        decode = (lv.get("decode_tok_s") or {}).get("median")
        tpot = lv.get("tpot_ms") or {}
        if total is None and decode is None:
            continue
        rate = lv.get("request_rate")
        out.append(
            {
                "load": rate if rate else lv["concurrency"],
                "kind": "rate" if rate else "concurrency",
                "total_tok_s": total,
                "per_stream_tok_s": decode,
                "tpot_p50_ms": tpot.get("median"),
                "tpot_p99_ms": tpot.get("p99"),
                "status": lv.get("status"),
            }
        )
    return sorted(out, key=lambda p: p["load"])


def knee(pts: Sequence[dict]) -> dict | None:
    """The knee point (see the module doc) with a one-line reading; None with fewer than two points."""
    have = [p for p in pts if p.get("total_tok_s")]
    if len(have) < 2:
        return None
    peak = max(p["total_tok_s"] for p in have)
    k = next(p for p in have if p["total_tok_s"] >= KNEE_SHARE * peak)
    first = have[0]
    unit = "req/s" if k["kind"] == "rate" else "streams"
    line = (
        f"knee at {k['load']:g} {unit}: {k['total_tok_s']:.1f} tok/s total ({k['total_tok_s'] / peak:.0%} of"
        f" the peak {peak:.1f})"
    )
    if k["tpot_p50_ms"] and first["tpot_p50_ms"]:
        line += (
            f", TPOT p50 {k['tpot_p50_ms']:.2f} ms (x{k['tpot_p50_ms'] / first['tpot_p50_ms']:.2f} the lowest"
            " load's)"
        )
    return {
        "load": k["load"],
        "kind": k["kind"],
        "total_tok_s": k["total_tok_s"],
        "peak_tok_s": peak,
        "share": KNEE_SHARE,
        "line": line,
    }


def summary(levels: Sequence[dict]) -> dict:
    pts = points(levels)
    return {"points": pts, "knee": knee(pts)}
