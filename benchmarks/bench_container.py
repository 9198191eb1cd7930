"""Round-trip cost of one step through SSH + `docker exec` vs SSH alone, on this machine (one run, a ratio).

Starts a real dockerd of its own (no host networking changes), the sandbox image, one container, and a sandbox
sshd host on loopback; then times, in one process and interleaved, N steps of each kind over one open
connection: a shell step (`true`) and a Python step (the stdlib bootstrap with a tiny script, as every sglops
host step is). Prints min / median / max per kind and the median ratios.

    python benchmarks/bench_container.py [--n 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.core.hosts import load_inventory  # noqa: E402
from sglops.core.remote import connect  # noqa: E402
from sglops.sandbox import docker  # noqa: E402
from sglops.sandbox.sshd import Sandbox  # noqa: E402


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    n = ap.parse_args().n
    base = Path(tempfile.mkdtemp(prefix="sglops-bench-ctr-"))
    daemon = docker.Dockerd(Path(f"/tmp/sglops-dockerd-{uuid.uuid4().hex[:8]}")).start()
    sb = Sandbox(base, [{"name": "host"}]).start()
    try:
        image = docker.ensure_image(daemon)
        docker.docker_wrapper(daemon, sb.host("host").bin)
        name = f"sglops-bench-{uuid.uuid4().hex[:6]}"
        docker.run_container(daemon, image, name)
        h = sb.host("host")
        sb.write_inventory(
            extra=[
                {
                    "name": "ctr",
                    "address": "127.0.0.1",
                    "port": h.port,
                    "container": name,
                    "python": "python3",
                }
            ]
        )
        inv = load_inventory(sb.inventory)
        results = {}
        with connect(inv.get("host"), inventory=inv) as plain, connect(inv.get("ctr"), inventory=inv) as ctr:
            # warm both connections
            for r in (plain, ctr):
                r.run(["true"])
            for label in ("ssh", "ssh+docker exec"):
                results[f"{label}: shell step"] = []
                results[f"{label}: python step"] = []
            # interleaved, so drift hits both
            for _ in range(n):
                for label, r in (("ssh", plain), ("ssh+docker exec", ctr)):
                    results[f"{label}: shell step"] += timed(lambda r=r: r.run(["true"]), 1)
                    results[f"{label}: python step"] += timed(lambda r=r: r.run(["python3", "-c", "pass"]), 1)
        rows = {
            k: {"min_ms": min(v) * 1e3, "median_ms": statistics.median(v) * 1e3, "max_ms": max(v) * 1e3}
            for k, v in results.items()
        }
        for k, v in rows.items():
            print(
                f"{k:32s} min {v['min_ms']:7.1f} ms  median {v['median_ms']:7.1f} ms  max"
                f" {v['max_ms']:7.1f} ms"
            )
        for kind in ("shell step", "python step"):
            ratio = rows[f"ssh+docker exec: {kind}"]["median_ms"] / rows[f"ssh: {kind}"]["median_ms"]
            print(f"ratio ({kind}, median): x{ratio:.2f}")
            rows[f"ratio {kind}"] = ratio
        print(json.dumps({"n": n, **rows}))
    finally:
        sb.stop()
        daemon.stop()


if __name__ == "__main__":
    main()
