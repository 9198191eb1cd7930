"""How long a real SGLang CPU server takes from launch to /health 200, with and without an environment change,
in interleaved rounds (A B A B ...: a machine that gets busier or quieter weighs on both sides alike).

    python tests/suite_start_cost.py --rounds 3            # stock env vs sglang_cpu.START_ENV
    python tests/suite_start_cost.py --rounds 3 --b-env K=V  # stock env vs K=V

Prints each start, the medians and the ratio B/A; the load average before and after (2 shared cores here).
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

from sglops.sandbox import sglang_cpu  # noqa: E402
from sglops.sandbox.sshd import free_port  # noqa: E402


def one_start(folder: Path, tag: str, env: dict[str, str]) -> float:
    """Seconds from Popen to /health 200 of one server (stopped right after)."""
    t0 = time.monotonic()
    server = sglang_cpu.start_server(free_port(), folder / f"{tag}.log", timeout=600, env=env)
    took = time.monotonic() - t0
    server.stop()
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--b-env", action="append", default=[], metavar="K=V", help="side B's variables")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        print("suite_start_cost: --rounds must be at least 1", file=sys.stderr)
        return 2
    reason = sglang_cpu.not_ready()
    if reason:
        print(f"suite_start_cost: {reason}", file=sys.stderr)
        return 1
    if args.b_env:
        b_env = dict(kv.split("=", 1) for kv in args.b_env)
    else:
        b_env = sglang_cpu.start_env()
    # side A: the stock start (every model module imported); neutralise a START_ENV the caller's env may carry
    a_env = {k: "" for k in b_env}
    print(
        f"load before: {os.getloadavg()[0]:.2f}; B sets"
        f" {', '.join(f'{k} ({len(v)} chars)' for k, v in b_env.items())}"
    )
    times: dict[str, list[float]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory(prefix="start-cost-") as tmp:
        for i in range(args.rounds):
            for side, env in (("A", a_env), ("B", b_env)):
                s = one_start(Path(tmp), f"{side}{i}", env)
                times[side].append(s)
                print(f"round {i + 1} {side}: {s:.1f} s to /health 200", flush=True)
    a, b = statistics.median(times["A"]), statistics.median(times["B"])
    print(
        f"median A {a:.1f} s, B {b:.1f} s: B/A = {b / a:.2f} ({args.rounds} rounds each); "
        f"load after: {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
