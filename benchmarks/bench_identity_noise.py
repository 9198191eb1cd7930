"""Run-to-run output noise of the real SGLang 0.5.23 CPU server: the numbers behind compare's tolerance mode.

Same prompts (same seed, runs=1, one level: the bench client draws identical prompt ids), answered:
  base       C=1, fresh server
  again      C=1, same server after /flush_cache (no prefix-cache hits)
  cached     C=1, same server, prompts already in the prefix cache (only the last prompt token is prefilled)
  batch4     C=4 (the same prompts batched 4 at a time)
  batch8     C=8
  restart    C=1 after a server restart
  float32    C=1, a server launched with --dtype float32: not noise but a real numeric change, for scale
Each against base: prompts with identical token ids, max |logprob difference| over the tokens both chose.

    python3 benchmarks/bench_identity_noise.py --requests 8 --output-len 64
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.bench import compare
from sglops.bench import run as bench  # noqa: E402
from sglops.core.hosts import load_inventory, local_host  # noqa: E402
from sglops.core.op import new_run_id  # noqa: E402
from sglops.core.remote import connect  # noqa: E402
from sglops.sandbox.sglang_cpu import start_server  # noqa: E402
from sglops.sandbox.sshd import free_port  # noqa: E402


def flush(port: int) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/flush_cache", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
    time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="identity-noise-"))
    os.environ["SGLOPS_ARTIFACTS"] = str(tmp / "artifacts")
    port = free_port()
    runs: dict[str, str] = {}
    with connect(local_host(load_inventory("/nonexistent/hosts.yaml"))) as remote:

        def one(name: str, c: int, do_flush: bool = True) -> None:
            if do_flush:
                flush(port)
            res = bench.record(
                bench.run_bench(
                    remote,
                    runs=1,
                    input_len=args.input_len,
                    output_len=args.output_len,
                    concurrency=c,
                    requests=args.requests,
                    port=port,
                    warmup=1,
                    with_facts=False,
                ),
                new_run_id(),
            )
            assert res.status == "ok", res.problems()
            runs[name] = res.run_id

        for round_ in ("first", "restart", "float32"):
            extra = ("--dtype", "float32") if round_ == "float32" else ()
            server = start_server(port, tmp / f"server-{round_}.log", extra=extra, timeout=900)
            try:
                if round_ == "first":
                    one("base", 1)
                    one("again", 1)
                    one("cached", 1, do_flush=False)
                    one("batch4", 4)
                    one("batch8", 8)
                else:
                    one(round_, 1)
            finally:
                server.stop()
    out = {"config": vars(args), "runs": runs, "against_base": {}}
    for name in runs:
        if name == "base":
            continue
        v = compare.compare([runs["base"], runs[name]], chart=False, out_dir=tmp / f"cmp-{name}").identity
        d = v.first_divergence
        out["against_base"][name] = {
            "identical_prompts": f"{v.identical_prompts}/{v.compared}",
            "max_logprob_diff": v.max_logprob_diff,
            "tokens_compared": v.logprob_tokens,
            "first_divergence": d.describe() if d else None,
            "line": v.line(),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
