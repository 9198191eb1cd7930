"""Where the suite's time goes: seconds per module (setup + call + teardown of its tests) and per xdist
worker, printed at the end of every run, so a CI log that keeps nothing else still says which modules to cut.

Why per module: scripts/test.sh hands whole modules to workers (tests/suite_schedule.py), so a module's summed
durations are its share of one worker's wall time, and the busiest worker's total is the critical path. The
same table is what suite_schedule.WEIGHTS is updated from (`SGLOPS_SUITE_TIMES=FILE` also writes it as JSON).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

TOP = 15


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of the whole machine since boot, from /proc/stat (None without it)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # idle + iowait
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields[:8]) - idle, sum(fields[:8])


def cpu_line(start: tuple[int, int] | None, end: tuple[int, int] | None) -> str | None:
    """How busy the machine's cores were over the run: near 100% the suite is CPU-bound (only less work makes
    it shorter); well below, it waits (more workers or less waiting would)."""
    if not start or not end or end[1] <= start[1]:
        return None
    busy = (end[0] - start[0]) / (end[1] - start[1])
    return f"cpu: {100 * busy:.0f}% busy over the run ({os.cpu_count()} cores, the whole machine)"


@dataclass
class ModuleTime:
    """One module's summed durations, its test count and the worker(s) that ran it."""

    seconds: float = 0.0
    tests: int = 0
    workers: set[str] = field(default_factory=set)


class SuiteTimes:
    """Collects TestReports (the controller's under xdist, the only process's otherwise)."""

    def __init__(self) -> None:
        self.modules: dict[str, ModuleTime] = {}
        self.cpu_at_start = cpu_ticks()

    def add(self, nodeid: str, when: str, duration: float, worker: str = "main") -> None:
        mod = self.modules.setdefault(os.path.basename(nodeid.split("::", 1)[0]), ModuleTime())
        mod.seconds += duration
        mod.workers.add(worker)
        if when == "call":
            mod.tests += 1

    def workers(self) -> dict[str, float]:
        """Seconds of tests each worker ran (a module that ran on two workers is split evenly: a rerun)."""
        out: dict[str, float] = {}
        for m in self.modules.values():
            for w in m.workers:
                out[w] = out.get(w, 0.0) + m.seconds / len(m.workers)
        return out

    def lines(self, top: int = TOP) -> list[str]:
        """The summary: the slowest modules, then each worker's
        total (the largest one bounds the wall time)."""
        if not self.modules:
            return []
        total = sum(m.seconds for m in self.modules.values())
        ranked = sorted(self.modules.items(), key=lambda kv: -kv[1].seconds)
        out = [
            f"slowest modules (setup + call + teardown; {len(ranked)} modules, {total:.0f} s of tests in"
            " all):"
        ]
        for name, m in ranked[:top]:
            where = ",".join(sorted(m.workers))
            out.append(f"  {m.seconds:8.1f} s  {m.tests:4d} tests  {name}  [{where}]")
        per_worker = sorted(self.workers().items())
        if len(per_worker) > 1:
            out.append("per worker: " + ", ".join(f"{w} {s:.0f} s" for w, s in per_worker))
        cpu = cpu_line(self.cpu_at_start, cpu_ticks())
        return out + ([cpu] if cpu else [])

    def to_json(self) -> dict:
        return {
            name: {"seconds": round(m.seconds, 2), "tests": m.tests, "workers": sorted(m.workers)}
            for name, m in sorted(self.modules.items())
        }


TIMES = SuiteTimes()


def record(report) -> None:
    """pytest_runtest_logreport: every phase of every test, wherever it ran."""
    # xdist's WorkerController on the controller
    node = getattr(report, "node", None)
    worker = getattr(getattr(node, "gateway", None), "id", None) or "main"
    TIMES.add(report.nodeid, report.when, float(getattr(report, "duration", 0.0) or 0.0), worker)


def summary(config, write_line) -> None:
    """pytest_terminal_summary: the table (not on xdist workers: the controller prints the whole run's)."""
    if hasattr(config, "workerinput"):
        return
    lines = TIMES.lines()
    for line in lines:
        write_line(line)
    path = os.environ.get("SGLOPS_SUITE_TIMES")
    if path and TIMES.modules:
        with open(path, "w") as f:
            json.dump(TIMES.to_json(), f, indent=1)
