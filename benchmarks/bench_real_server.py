"""Benchmark: `inv restart` / stop of the REAL SGLang 0.5.23 CPU server on a sandbox host.

One sandbox host with the real server environment (sglang_env: cpu; scripts/setup.sh builds it), profile
sandbox-sglang-cpu. Each round: restart (stop the previous server + start + /health + /server_info check),
then the figures: restart-to-healthy (the host-side wait for /health), the whole restart as the operator waits
for it, and the stop of the whole process tree. The machine's load average is printed with each round: on a
2-core machine shared with other work, start-up time follows the load more than anything sglops does.
Run: python3 benchmarks/bench_real_server.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.core.hosts import load_inventory  # noqa: E402
from sglops.core.remote import connect  # noqa: E402
from sglops.launch import server as launch  # noqa: E402
from sglops.sandbox import sglang_cpu  # noqa: E402
from sglops.sandbox.sshd import Sandbox, free_port  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    reason = sglang_cpu.not_ready()
    if reason:
        sys.exit(f"bench_real_server: {reason}")
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        sb = Sandbox(Path(tmp), [{"name": "cpu-a", "sglang_env": "cpu"}]).start()
        os.environ["SGLOPS_INVENTORY"] = str(sb.inventory)
        try:
            inv = load_inventory(sb.inventory)
            with connect(inv.get("cpu-a"), inventory=inv) as remote:
                for i in range(args.rounds):
                    t0 = time.perf_counter()
                    res = launch.restart(remote, "sandbox-sglang-cpu", port=free_port())
                    whole = time.perf_counter() - t0
                    assert res.ok, res.failure_line()
                    t1 = time.perf_counter()
                    stopped = launch.stop(remote, grace_s=15)
                    stop_s = time.perf_counter() - t1
                    assert stopped["left"] == [], stopped
                    row = {
                        "round": i + 1,
                        "healthy_after_s": res.waited_s,
                        "restart_s": round(whole, 2),
                        "confirmed": len(res.confirmed),
                        "mismatches": len(res.mismatches),
                        "stop_s": round(stop_s, 2),
                        "stop_host_s": stopped["took_s"],
                        "processes": stopped["processes"],
                        "load1": os.getloadavg()[0],
                    }
                    rounds.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            sb.stop()
    summary = {k: statistics.median(r[k] for r in rounds) for k in ("healthy_after_s", "restart_s", "stop_s")}
    print(json.dumps({"median": summary, "rounds": len(rounds)}))


if __name__ == "__main__":
    main()
