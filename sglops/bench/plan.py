"""A bench's plan: every flag of the bench family checked once, and the loads built from them once.

`inv bench`'s prepare makes it (before any host is touched) and the work function takes it; library callers
(ab's rounds, a sweep's candidates, tests) hand `run_bench` keyword flags and it is made the same way. The
host script is sent `host_args()`: every declared flag under its declared name, defaults filled here (the host
keeps none of its own), beside the parsed levels, dataset and SLOs. A new bench flag is therefore its `Param`
in sglops.bench.params and the line of the host script that reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglops.bench import loads
from sglops.bench.params import BENCH, LOADS
from sglops.core.errors import ConfigError
from sglops.core.values import check

FLAGS = {p.name: p.kind for p in (*BENCH, *LOADS) if p.kind is not None}


@dataclass(frozen=True)
class BenchPlan:
    """The checked flags (`flags`, declared name -> value, defaults filled) and what is built from them: the
    levels in order, the dataset (a file or trace read here, offline) and goodput's SLOs (ms). A flag reads as
    an attribute: `plan.runs`, `plan.request_rate`."""

    flags: Mapping[str, Any]
    levels: tuple[dict, ...]
    dataset: dict
    slo: dict[str, float] | None

    def __getattr__(self, name: str) -> Any:
        if name == "flags":
            raise AttributeError(name)
        try:
            return self.flags[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def open_loop(self) -> bool:
        return any(lv["rate"] for lv in self.levels) or self.dataset.get("kind") == "trace"

    def host_args(self) -> dict[str, Any]:
        """What the host script is sent: the flags as declared, the levels, the dataset, the SLOs."""
        return {
            **self.flags,
            "levels": [dict(lv) for lv in self.levels],
            "dataset": self.dataset,
            "slo": self.slo,
        }

    def describe(self) -> str:
        """The dataset in one phrase (the record's `input`, a dry run's line)."""
        return loads.describe(self.dataset, self.input_len, self.output_len)

    def with_levels(self, levels: list[dict]) -> BenchPlan:
        """The same plan at other levels (the max-rate search probes one rate at a time)."""
        return BenchPlan(self.flags, tuple(levels), self.dataset, self.slo)


def plan_bench(options: Mapping[str, Any], *, checked: bool = False) -> BenchPlan:
    """The plan from the bench flags: `checked` when the runner has already checked each flag's kind (the task
    and the play step), else each is checked here (library callers hand raw values: `concurrency="1,4"`)."""
    given = {k: v for k, v in options.items() if k in FLAGS}
    unknown = sorted(set(options) - set(FLAGS))
    if unknown:
        raise ConfigError(f"--{unknown[0].replace('_', '-')} is not a bench flag")
    flags = (
        {name: kind.default for name, kind in FLAGS.items()}
        | {k: v for k, v in given.items() if v is not None}
        if checked
        else check(FLAGS, given)
    )
    if flags["duration"] and flags["requests"]:
        raise ConfigError("--duration and --requests: a level is bounded by one of them")
    loads.check_metrics_interval(flags["metrics_interval"])
    levels = loads.levels(list(flags["concurrency"] or [1]), flags["request_rate"], flags["sweep"])
    dataset = loads.parse_dataset(flags["dataset"], flags["output_len"])
    if dataset.get("kind") == "trace":
        if flags["request_rate"] is not None or flags["sweep"] or list(flags["concurrency"] or [1]) != [1]:
            raise ConfigError(
                "--dataset trace: the trace's timestamps are the arrivals (scale them with "
                "--trace-speed, not --request-rate, --sweep or --concurrency)"
            )
        levels = [{"concurrency": 0, "rate": None, "trace": True}]
    slo = loads.parse_slo(flags["slo"])
    if flags["max_rate"] and not slo:
        raise ConfigError(
            "--max-rate needs --slo (e.g. --slo ttft=500,tpot=50): the rate is the highest that meets it"
        )
    loads.check_api(flags["api"], dataset)
    if flags["max_rate"] and (flags["sweep"] or dataset.get("kind") in ("trace", "sessions")):
        raise ConfigError("--max-rate probes open-loop rates: not with --sweep, a trace or sessions")
    return BenchPlan(flags, tuple(levels), dataset, slo)
