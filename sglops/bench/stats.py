"""Small statistics for benchmark figures: percentiles, summaries, bootstrap intervals, noise.

Why our own: the figures must be computed the same way every time and the same way as
SGLang's `bench_serving` (numpy's linear-interpolation percentiles), and the bootstrap is
seeded so re-analysing a recorded run gives the same interval.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence

# AIPerf calls CV < 5% excellent; above it we flag the figure.
NOISY_CV = 0.05


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation, as numpy.percentile does."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def summary(values: Sequence[float]) -> dict[str, float | int] | None:
    """mean/median/std/p90/p95/p99/min/max/n, the fields bench_serving users know; None when empty."""
    if not values:
        return None
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "median": percentile(values, 50),
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        "p90": percentile(values, 90),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "min": min(values),
        "max": max(values),
    }


def cv(values: Sequence[float]) -> float | None:
    """Coefficient of variation (sample stdev / mean); None with fewer than two values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else None


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[[Sequence[float]], float] = median,
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of stat(values); None with fewer than two values.

    With few repeats the interval is honest but coarse: it cannot be wider than the values seen.
    """
    if len(values) < 2:
        return None
    rng = random.Random(seed)
    n = len(values)
    draws = [stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples)]
    tail = (1 - level) / 2 * 100
    return percentile(draws, tail), percentile(draws, 100 - tail)


def bootstrap_ratio_ci(
    base: Sequence[float],
    other: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Interval of median(other) / median(base), each side resampled on its own."""
    if len(base) < 2 or len(other) < 2:
        return None
    rng = random.Random(seed)
    nb, no = len(base), len(other)
    draws = []
    for _ in range(resamples):
        b = median([base[rng.randrange(nb)] for _ in range(nb)])
        o = median([other[rng.randrange(no)] for _ in range(no)])
        if b:
            draws.append(o / b)
    if not draws:
        return None
    tail = (1 - level) / 2 * 100
    return percentile(draws, tail), percentile(draws, 100 - tail)


def figure(values: Sequence[float], *, seed: int = 0) -> dict | None:
    """A repeated figure: median, bootstrap interval, CV and whether it is noisy (CV > 5%)."""
    if not values:
        return None
    spread = cv(values)
    ci = bootstrap_ci(values, seed=seed)
    return {
        "median": median(values),
        "ci95": list(ci) if ci else None,
        "cv": spread,
        "noisy": spread is not None and spread > NOISY_CV,
        "values": list(values),
    }


def paired_ratio_ci(
    base: Sequence[float],
    other: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, tuple[float, float] | None] | None:
    """Median of the per-pair ratios other[i] / base[i] and its paired-bootstrap interval.

    Why paired: in an interleaved A/B (ABAB...) a slow drift of the host moves both sides of a round
    together; the ratio within a round cancels it, where resampling each side on its own
    (bootstrap_ratio_ci) counts the drift as noise. Pairs are resampled whole (round indices drawn with
    replacement). None without a pair; the interval is None with a single pair. With few pairs the
    interval cannot be wider than the ratios seen.
    """
    if len(base) != len(other):
        raise ValueError(f"paired samples differ in length ({len(base)} vs {len(other)})")
    ratios = [o / b for b, o in zip(base, other, strict=True) if b]
    if not ratios:
        return None
    if len(ratios) < 2:
        return median(ratios), None
    return median(ratios), bootstrap_ci(ratios, level=level, resamples=resamples, seed=seed)
