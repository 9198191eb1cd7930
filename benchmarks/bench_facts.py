"""Benchmark: `inv facts` on 4 sandbox hosts in parallel vs on one host (target: <= 1.5x).

Real sshd hosts on loopback; each measurement opens fresh connections, as a task does.
Run: python3 benchmarks/bench_facts.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.core.hosts import load_inventory  # noqa: E402
from sglops.core.parallel import on_hosts  # noqa: E402
from sglops.probe.facts import gather  # noqa: E402
from sglops.sandbox.sshd import Sandbox  # noqa: E402


def busy_cpu_s() -> float:
    """CPU seconds spent by every process on this machine so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as fh:
        vals = [int(v) for v in fh.readline().split()[1:]]
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")


def timed(hosts, inv) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole machine: laptop side, sshd and the host scripts)."""
    cpu0, start = busy_cpu_s(), time.perf_counter()
    outcomes = on_hosts(hosts, gather, inventory=inv)
    elapsed, cpu = time.perf_counter() - start, busy_cpu_s() - cpu0
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
    return elapsed, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sb = Sandbox(Path(tmp), [{"name": f"h{i}"} for i in range(4)]).start()
        try:
            inv = load_inventory(sb.inventory)
            hosts = [inv.get(f"h{i}") for i in range(4)]
            # warm caches (page cache, pyc) once
            timed(hosts, inv)
            one, four, cpu1 = [], [], []
            # interleaved so drift hits both alike
            for _ in range(args.repeats):
                wall, cpu = timed(hosts[:1], inv)
                one.append(wall)
                cpu1.append(cpu)
                four.append(timed(hosts, inv)[0])
        finally:
            sb.stop()
    m1, m4, c1 = statistics.median(one), statistics.median(four), statistics.median(cpu1)
    cores = os.cpu_count() or 1
    # The sandbox hosts run on this machine's cores: 4 hosts cannot finish before 4x one host's CPU / cores.
    floor = max(m1, 4 * c1 / cores)
    print(
        f"facts, 1 host : median {m1 * 1000:.0f} ms  (runs: {', '.join(f'{x * 1000:.0f}' for x in one)})"
        f"; machine CPU per 1-host run {c1 * 1000:.0f} ms"
    )
    print(f"facts, 4 hosts: median {m4 * 1000:.0f} ms  (runs: {', '.join(f'{x * 1000:.0f}' for x in four)})")
    print(f"ratio 4 hosts / 1 host: {m4 / m1:.2f}x (target <= 1.5x)")
    print(
        f"CPU floor on {cores} shared cores: {floor * 1000:.0f} ms = {floor / m1:.2f}x; "
        f"4 hosts took {m4 / floor:.2f}x that floor"
    )


if __name__ == "__main__":
    main()
