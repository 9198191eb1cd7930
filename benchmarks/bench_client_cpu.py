"""Bench client CPU per token: user+sys CPU of the on-host client process while measuring / tokens received.

Runs the host script of whichever sglops is first on PYTHONPATH against a running server, so the same command
measures a before and an after tree (issue 12: figure for the closing note):

    git archive 639e11e | tar -x -C /tmp/sglops-before          # the tree before issue 12's bench work
    PYTHONPATH=/tmp/sglops-before python3 benchmarks/bench_client_cpu.py --port PORT
    PYTHONPATH=$PWD python3 benchmarks/bench_client_cpu.py --port PORT

The before tree drew prompt ids from 1000-30000, which kills a server with a smaller vocabulary: both trees
get ids in [3, 1000) here (the old `token_range` argument; the new client reads the vocabulary itself).
"""

from __future__ import annotations

import argparse
import json

import sglops
from sglops.core.hosts import load_inventory, local_host
from sglops.core.remote import connect


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--no-logprobs", action="store_true", help="outputs kept without logprobs (trees that keep them)")
    args = ap.parse_args()
    out = {"sglops": sglops.__file__}
    with connect(local_host(load_inventory("/nonexistent/hosts.yaml"))) as remote:
        for api in ("sglang", "openai"):
            raw = remote.run_py("bench_client", {
                "port": args.port, "api": api, "runs": args.runs, "input_len": args.input_len,
                "output_len": args.output_len, "concurrency": [int(c) for c in args.concurrency.split(",")],
                "warmup": 1, "token_range": [3, 1000], "logprobs": not args.no_logprobs}, timeout=3600)
            tokens = raw["client_tokens"]
            out[api] = {"cpu_s": round(raw["client_cpu_s"], 4), "tokens": tokens,
                        "cpu_us_per_token": round(raw["client_cpu_s"] / tokens * 1e6, 1)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
