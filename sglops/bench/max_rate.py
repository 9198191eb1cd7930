"""`inv bench --max-rate --slo ttft=..,tpot=.. [--goodput 0.9]`: the highest request rate whose goodput meets
the target, found by bracketing (doubling or halving from the first rate) then bisecting (geometric
midpoints), within TOLERANCE of the boundary in at most MOST_LEVELS levels.

A level meets the target when the share of its requests within every SLO (goodput's share: failed requests
count against it) is at least `--goodput`. The answer is the highest rate that met it; the search stops when
the lowest rate that missed is at most (1 + TOLERANCE)^2 above it, so the boundary lies within +-TOLERANCE of
the bracket's geometric midpoint (`boundary_req_s`); a search that runs out of levels says how wide its
bracket still is. Every probed level is a bench run of its own, recorded as any bench is; the search keeps
them in one result, one table and one chart.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglops.bench.plan import BenchPlan
    from sglops.bench.run import BenchResult
    from sglops.core.remote import Remote

MOST_LEVELS = 8
TOLERANCE = 0.05
# req/s, without --request-rate
START_RATE = 1.0
# probe k sends seed PROBE_SEED + k's prompts: a later level never finds an earlier one's in the cache
PROBE_SEED = 7001


@dataclass
class Probe:
    """One probed level: its rate, the share of requests
    within the SLOs, whether that met the target, its run."""

    rate: float
    share: float | None
    met: bool
    run_id: str | None = None
    phase: str = "bracket"


@dataclass
class Search:
    """The search's course and answer."""

    target: float
    slo: dict[str, float]
    probes: list[Probe] = field(default_factory=list)
    # the highest rate that met the target (None: not even the lowest probed)
    answer: float | None = None
    # the lowest rate that missed it, above the answer (None: none missed)
    bound: float | None = None
    converged: bool = False

    @property
    def boundary(self) -> float | None:
        """Where goodput crosses the target: the bracket's geometric midpoint (+-TOLERANCE once converged)."""
        return _round(math.sqrt(self.answer * self.bound)) if self.answer and self.bound else None

    @property
    def width(self) -> float | None:
        """The bracket's relative width (bound / answer - 1)."""
        return self.bound / self.answer - 1 if self.answer and self.bound else None

    def line(self) -> str:
        levels = f"{len(self.probes)} level(s)"
        if self.answer is None:
            return (
                f"no rate met goodput {self.target:.0%} within the SLO (lowest probed"
                f" {min(p.rate for p in self.probes):g} req/s), {levels}"
            )
        if self.bound is None:
            return (
                f"every probed rate met goodput {self.target:.0%}: at least {self.answer:g} req/s, {levels}"
            )
        within = (
            f"boundary {self.boundary:.3g} req/s +-5%"
            if self.converged
            else f"bracket still {self.width:.0%} wide"
        )
        return (
            f"max rate {self.answer:.3g} req/s at goodput >= {self.target:.0%} (missed at {self.bound:.3g}"
            f" req/s; {within}), {levels}"
        )

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "slo_ms": self.slo,
            "answer_req_s": self.answer,
            "bound_req_s": self.bound,
            "converged": self.converged,
            "width": self.width,
            "boundary_req_s": self.boundary,
            "line": self.line(),
            "most_levels": MOST_LEVELS,
            "tolerance": TOLERANCE,
            "probes": [
                {
                    "order": k + 1,
                    "rate": p.rate,
                    "goodput_share": p.share,
                    "met": p.met,
                    "phase": p.phase,
                    "run_id": p.run_id,
                }
                for k, p in enumerate(self.probes)
            ],
        }


def search(
    probe: Callable[[float, str], tuple[float | None, str | None]],
    slo: dict[str, float],
    target: float,
    start: float | None = None,
    most: int = MOST_LEVELS,
    tolerance: float = TOLERANCE,
) -> Search:
    """Run the search; `probe(rate, phase)` measures one level and returns (goodput share, run id)."""
    s = Search(target, slo)
    rate = float(start or START_RATE)

    def run(r: float, phase: str) -> bool:
        share, run_id = probe(r, phase)
        met = share is not None and share >= target
        s.probes.append(Probe(r, share, met, run_id, phase))
        if met and (s.answer is None or r > s.answer):
            s.answer = r
        if not met and (s.bound is None or r < s.bound):
            s.bound = r
        return met

    met = run(rate, "bracket")
    step = 2.0 if met else 0.5
    while len(s.probes) < most and ((s.bound is None) if met else (s.answer is None)):
        rate *= step
        run(rate, "bracket")
    wide = (1 + tolerance) ** 2
    while len(s.probes) < most and s.answer and s.bound and s.bound > s.answer * wide:
        run(_round(math.sqrt(s.answer * s.bound)), "bisect")
    s.converged = bool(s.answer and s.bound and s.bound <= s.answer * wide)
    return s


def _round(rate: float) -> float:
    """A probed rate to 3 significant figures (a rate the table can show as probed)."""
    return float(f"{rate:.3g}")


def run_max_rate(
    remote: Remote,
    plan: BenchPlan,
    run_id: str,
    keep: Callable[[BenchResult, str], object],
    on_progress: Callable[[dict], None] | None = None,
) -> BenchResult:
    """The search on remote's server: each probe a bench run of its own (`<run-id>-p<k>`, recorded through
    `keep`), then one result holding every probed level (by rate), the search and the sweep-shaped curve for
    its chart."""
    from sglops.bench import load_curve, run

    results: list[BenchResult] = []

    def probe(rate: float, phase: str) -> tuple[float | None, str]:
        if on_progress:
            on_progress({"phase": f"max-rate level {len(results) + 1} ({phase}) at {rate:g} req/s"})
        # its own prompts: no warm cache
        res = run.run_bench(
            remote,
            plan.with_levels([{"concurrency": 0, "rate": rate}]),
            on_progress=on_progress,
            with_facts=not results,
            seed=PROBE_SEED + len(results),
        )
        res.run_id = f"{run_id}-p{len(results) + 1}"
        keep(res, res.run_id)
        results.append(res)
        return (res.levels[0].goodput or {}).get("share"), res.run_id

    found = search(probe, plan.slo, plan.goodput, plan.request_rate)
    merged = run.merged(results)
    merged.max_rate = found.to_json()
    merged.sweep = load_curve.summary([lv.to_json() for lv in merged.levels])
    return merged
