"""`inv ab` wall time for N rounds on the REAL SGLang 0.5.23 CPU server, and where the time goes.

A sandbox sshd host with the real server environment (read-only here: the same profile on both sides, no
patch), `ab -a cpu -b cpu --rounds N` run in-process through the real SSH path. Prints the wall time, the
per-round restart and bench seconds, what is left for ab's own steps (ledger checks, restore), and the paired
interval of the B/A ratio next to the unpaired one over the same rounds (how much of the spread is drift both
sides share).

    python3 benchmarks/bench_ab.py --rounds 3 --requests 2 --input-len 16 --output-len 16
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.bench import stats  # noqa: E402
from sglops.core import artifacts  # noqa: E402
from sglops.core.hosts import load_inventory
from sglops.core.op import Context, new_run_id  # noqa: E402
from sglops.core.paths import REPO_ROOT
from sglops.core.remote import connect  # noqa: E402
from sglops.experiment import ab  # noqa: E402
from sglops.launch import server as launch  # noqa: E402
from sglops.sandbox import sglang_cpu  # noqa: E402
from sglops.sandbox.sshd import Sandbox, free_port  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--input-len", type=int, default=16)
    ap.add_argument("--output-len", type=int, default=16)
    args = ap.parse_args()
    reason = sglang_cpu.not_ready()
    if reason:
        sys.exit(f"real server environment not ready: {reason}")
    base = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    profiles = base / "profiles"
    profiles.mkdir()
    doc = yaml.safe_load((REPO_ROOT / "playbooks" / "profiles" / "sandbox-sglang-cpu.yaml").read_text())
    doc.update(port=free_port(), per_host={})
    (profiles / "cpu.yaml").write_text(yaml.safe_dump(doc))
    sb = Sandbox(base / "hosts", [{"name": "cpu-a", "sglang_env": "cpu"}]).start()
    os.environ.update(
        SGLOPS_INVENTORY=str(sb.inventory),
        SGLOPS_PROFILES=str(profiles),
        SGLOPS_ARTIFACTS=str(base / "artifacts"),
    )
    inv = load_inventory(sb.inventory)
    try:
        with connect(inv.get("cpu-a"), inventory=inv) as remote:
            t0 = time.monotonic()
            ctx = Context(
                remote,
                new_run_id(),
                on_event=lambda ev: print(f"  {time.monotonic() - t0:6.1f}s {ev.get('note')}", flush=True),
            )
            res = ab.run_ab(
                ctx,
                ab.parse_sides("cpu", "cpu", None),
                rounds=args.rounds,
                bench={
                    "runs": 1,
                    "requests": args.requests,
                    "input_len": args.input_len,
                    "output_len": args.output_len,
                },
            )
            # as the runner records it
            artifacts.keep(remote.name, ctx.run_id, "ab.json", res, task="ab")
            wall = time.monotonic() - t0
            launch.stop(remote)
    finally:
        sb.stop()
    restart = sum(r.restart_s or 0 for r in res.rounds)
    bench = sum(r.bench_s or 0 for r in res.rounds)
    print(
        f"\nab {args.rounds} rounds (2 x {args.rounds} restarts + benches), {args.requests} requests per"
        f" bench, in {args.input_len} / out {args.output_len}: wall {wall:.1f} s"
    )
    print(
        f"  restarts {restart:.1f} s ({restart / len(res.rounds):.1f} s each), benches {bench:.1f} s "
        f"({bench / len(res.rounds):.1f} s each), ab's own steps + restore {wall - restart - bench:.1f} s"
    )
    print(f"  verdict: {res.verdict()}")
    a = [r.decode_tok_s for r in res.rounds if r.side == "A"]
    b = [r.decode_tok_s for r in res.rounds if r.side == "B"]
    if len(a) >= 2 and None not in a + b:
        unpaired = stats.bootstrap_ratio_ci(a, b)
        print(
            f"  decode tok/s A {', '.join(f'{x:.1f}' for x in a)}; B {', '.join(f'{x:.1f}' for x in b)}; B/A"
            f" paired {res.ratio:.3f} {res.ratio_ci}, unpaired {stats.median(b) / stats.median(a):.3f}"
            f" {unpaired}"
        )
    print(f"  host restored: {res.restore}")


if __name__ == "__main__":
    main()
