"""The server's own figures over a bench level, from the /metrics samples the host client took during it
(sglops/host/_bench_metrics.py): what the server says it was doing, to set beside what the client measured.

- running / queued requests: median and max over the samples;
- token_usage (share of the KV pool in use): max; cache_hit_rate (the prefix cache): the last sample's;
- server gen tok/s: the generation_tokens counter's rise over the level / the time between the samples
  (the server's total output rate; beside the client's output tok/s);
- server decode tok/s per stream: median over samples of gen_throughput / running requests (the scheduler's
  own decode rate, beside the client's per-request decode tok/s).
"""

from __future__ import annotations

from collections.abc import Sequence

from sglops.bench import stats


def _vals(samples: Sequence[dict], key: str) -> list[float]:
    return [s[key] for s in samples if isinstance(s.get(key), int | float)]


def _rise(samples: Sequence[dict], key: str) -> float | None:
    """Counter rise per second between the first and the last sample that carry it."""
    have = [s for s in samples if isinstance(s.get(key), int | float)]
    if len(have) < 2 or have[-1]["t"] <= have[0]["t"]:
        return None
    return (have[-1][key] - have[0][key]) / (have[-1]["t"] - have[0]["t"])


def summarise(repeats: Sequence[Sequence[dict]]) -> dict | None:
    """One level's server figures from each repeat's samples; None when no repeat has any."""
    runs = [list(s) for s in repeats if s]
    if not runs:
        return None
    pooled = [s for run in runs for s in run]
    out: dict = {"samples": len(pooled)}
    for key in ("running", "queued"):
        vals = _vals(pooled, key)
        if vals:
            out[key] = {"median": stats.median(vals), "max": max(vals)}
    usage = _vals(pooled, "token_usage")
    if usage:
        out["token_usage_max"] = max(usage)
    hits = [_vals(run, "cache_hit_rate") for run in runs]
    if any(hits):
        out["cache_hit_rate"] = [h[-1] for h in hits if h][-1]
    gen = [r for r in (_rise(run, "generation_tokens") for run in runs) if r is not None]
    if gen:
        out["gen_tok_s"] = stats.median(gen)
    per_stream = [
        s["gen_throughput"] / s["running"]
        for s in pooled
        if s.get("running") and isinstance(s.get("gen_throughput"), int | float) and s["gen_throughput"] > 0
    ]
    if per_stream:
        out["decode_tok_s_per_stream"] = stats.median(per_stream)
    return out
