"""Benchmark: `inv facts` on 4 sandbox hosts in parallel vs on one host (target: <= 1.5x).

Real sshd hosts on loopback; each measurement opens fresh connections, as a task does.
Run: python3 bench/bench_facts.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.facts import gather  # noqa: E402
from sglops.hosts import load_inventory  # noqa: E402
from sglops.parallel import on_hosts  # noqa: E402
from sglops.sandbox.sshd import Sandbox  # noqa: E402


def timed(hosts, inv) -> float:
    start = time.perf_counter()
    outcomes = on_hosts(hosts, gather, inventory=inv)
    elapsed = time.perf_counter() - start
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sb = Sandbox(Path(tmp), [{"name": f"h{i}"} for i in range(4)]).start()
        try:
            inv = load_inventory(sb.inventory)
            hosts = [inv.get(f"h{i}") for i in range(4)]
            timed(hosts, inv)  # warm caches (page cache, pyc) once
            one, four = [], []
            for _ in range(args.repeats):  # interleaved so drift hits both alike
                one.append(timed(hosts[:1], inv))
                four.append(timed(hosts, inv))
        finally:
            sb.stop()
    m1, m4 = statistics.median(one), statistics.median(four)
    print(f"facts, 1 host : median {m1 * 1000:.0f} ms  (runs: {', '.join(f'{x * 1000:.0f}' for x in one)})")
    print(f"facts, 4 hosts: median {m4 * 1000:.0f} ms  (runs: {', '.join(f'{x * 1000:.0f}' for x in four)})")
    print(f"ratio 4 hosts / 1 host: {m4 / m1:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
