"""How right is `inv bench`? Measured decode tok/s against a stand-in server streaming at known rates.

Every row starts the stand-in (sglops/sandbox/standin_server.py) at a known decode rate and runs the
real bench path, `sglops.bench.run.run_bench` -> remote.run_py("bench_client") -> the host's python,
against it on 127.0.0.1. It reports the error against the true rate and the client's own CPU time
per token (thread CPU of the request loop; process CPU is within a few percent).

    python benchmarks/bench_accuracy.py              # through a sandbox host (real sshd on loopback)
    python benchmarks/bench_accuracy.py --local      # same script through LocalRemote (no sshd needed)

Each request decodes for about --seconds so that a late first token (the stand-in's own scheduling
jitter, which the TTFT-based definition cannot tell from decode) stays well under 1%. Native
/generate streams carry the cumulative text and output_ids, so the stand-in's cost per chunk grows
with the position (as SGLang's does); --native-max-tokens keeps it able to hold its pace.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.bench.run import run_bench  # noqa: E402
from sglops.core.hosts import Host  # noqa: E402
from sglops.core.remote import LocalRemote, connect  # noqa: E402
from sglops.sandbox.sshd import HOST_PYTHON  # noqa: E402
from sglops.sandbox.standin_local import start_standin  # noqa: E402

RATES = "5,10.5,13.5,50,200,1000,2000,5000,10000"


@contextlib.contextmanager
def standin(rate: float, ttft_ms: float = 20):
    """A stand-in server on a free loopback port, decoding at `rate` tok/s."""
    server = start_standin(
        "--model-path", "standin", knobs={"TPS": repr(rate), "TTFT_MS": str(ttft_ms), "STARTUP_S": "0.05"}
    )
    try:
        server.wait_healthy(10)
        yield server.port
    finally:
        server.stop()


@contextlib.contextmanager
def bench_host(local: bool):
    """The host the client runs on: a real sshd sandbox host on loopback, or this machine directly."""
    if local:
        yield LocalRemote(Host(name="local", address="local", python=HOST_PYTHON))
        return
    from sglops.core.hosts import load_inventory
    from sglops.sandbox.sshd import Sandbox

    with (
        tempfile.TemporaryDirectory(prefix="sglops-accuracy-") as base,
        Sandbox(Path(base), [{"name": "bench-host"}]) as sb,
    ):
        inv = load_inventory(sb.inventory)
        with connect(inv.get("bench-host"), inventory=inv) as remote:
            yield remote


def tokens_for(api: str, rate: float, seconds: float, native_cap: int, cap: int) -> int:
    n = max(16, round(rate * seconds))
    return min(n, native_cap if api == "sglang" else cap)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default=RATES, help=f"true decode rates, tok/s (default {RATES})")
    ap.add_argument("--apis", default="sglang,openai")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="decode time per request (default 2)")
    ap.add_argument("--native-max-tokens", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=20000)
    ap.add_argument("--local", action="store_true", help="run the client through LocalRemote instead of sshd")
    ap.add_argument("--json", help="also write the rows to this file")
    opts = ap.parse_args()
    rows = []
    print(
        f"# bench accuracy on {platform.node()} ({os.cpu_count()} CPUs), python {platform.python_version()}, "
        f"{'LocalRemote' if opts.local else 'sandbox sshd host'}, {opts.runs} repeats + 1 warm-up"
    )
    print(
        "| api | true tok/s | tokens/request | measured tok/s (median) | error | 95% CI | CV "
        "| client CPU us/token | client CPU at this rate | within 1% |"
    )
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---|")
    with bench_host(opts.local) as remote:
        for api in opts.apis.split(","):
            for rate in (float(r) for r in opts.rates.split(",")):
                n = tokens_for(api, rate, opts.seconds, opts.native_max_tokens, opts.max_tokens)
                with standin(rate) as port:
                    res = run_bench(
                        remote,
                        runs=opts.runs,
                        input_len=32,
                        output_len=n,
                        api=api,
                        port=port,
                        with_facts=False,
                    )
                lv = res.levels[0]
                fig = lv.decode_tok_s or {}
                med = fig.get("median")
                err = med / rate - 1 if med else None
                cpu = lv.client_cpu_us_per_token
                row = {
                    "api": api,
                    "rate": rate,
                    "tokens": n,
                    "status": res.status,
                    "measured": med,
                    "error": err,
                    "ci95": fig.get("ci95"),
                    "cv": fig.get("cv"),
                    "values": fig.get("values"),
                    "client_cpu_us_per_token": cpu,
                    "client_cpu_share": cpu * rate / 1e6 if cpu else None,
                    "ok": res.status == "ok" and err is not None and abs(err) < 0.01,
                }
                rows.append(row)
                ci = row["ci95"]
                print(
                    f"| {api} | {rate:g} | {n} | {med:.3f} | {err:+.3%} | "
                    + (f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-")
                    + f" | {row['cv']:.2%} | {cpu:.1f} | {row['client_cpu_share']:.1%} | "
                    + ("yes" if row["ok"] else "**no**")
                    + " |"
                    if med
                    else f"| {api} | {rate:g} | {n} | {res.status} | | | | | | **no** |",
                    flush=True,
                )
    if opts.json:
        Path(opts.json).write_text(
            json.dumps(
                {"host": platform.node(), "cpus": os.cpu_count(), "local": opts.local, "rows": rows}, indent=2
            )
        )
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
