"""Bench client CPU per token with and without recording outputs (issue 14), before/after trees alternated.

Each round runs benchmarks/bench_client_cpu.py (user+sys CPU of the on-host client while measuring / tokens) three
ways against one running server: the tree before outputs were kept, this tree (ids + logprobs kept), and this
tree with --no-logprobs (ids only). Rounds alternate the three so a drifting host hits each alike; the ratio
of medians is printed in the same run.

    python3 -m sglops.sandbox.sglang_cpu   # once: the real server's venv and model
    python3 benchmarks/bench_outputs_cpu.py --port PORT --before-rev c27c357 --rounds 5 --output-len 256
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def one(tree: Path, port: int, args: argparse.Namespace, extra: list[str]) -> dict:
    cmd = [sys.executable, str(HERE / "bench_client_cpu.py"), "--port", str(port), "--runs", str(args.runs),
           "--input-len", str(args.input_len), "--output-len", str(args.output_len),
           "--concurrency", args.concurrency, *extra]
    out = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
                         check=True, timeout=3600)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--before-rev", default="c27c357", help="git revision before outputs were kept")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--concurrency", default="1,4")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        before.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before_rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        ways = {"before": (before, []), "ids+logprobs": (ROOT, []), "ids only": (ROOT, ["--no-logprobs"])}
        got: dict[str, dict[str, list[float]]] = {w: {"sglang": [], "openai": []} for w in ways}
        for r in range(args.rounds):
            for way, (tree, extra) in ways.items():
                doc = one(tree, args.port, args, extra)
                for api in ("sglang", "openai"):
                    got[way][api].append(doc[api]["cpu_us_per_token"])
            print(f"round {r + 1}: " + "; ".join(f"{w} {got[w]['sglang'][-1]:.0f}/{got[w]['openai'][-1]:.0f}"
                                                 for w in ways), file=sys.stderr)
    result = {"config": vars(args), "us_per_token": got, "median": {}, "ratio_to_before": {}}
    for api in ("sglang", "openai"):
        base = statistics.median(got["before"][api])
        for way in ways:
            med = statistics.median(got[way][api])
            result["median"].setdefault(way, {})[api] = round(med, 1)
            result["ratio_to_before"].setdefault(way, {})[api] = round(med / base, 3)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
