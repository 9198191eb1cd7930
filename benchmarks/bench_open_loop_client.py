"""Open-loop bench client: its CPU per request, and the request rate where the client itself becomes the bottleneck
(issue 26: figure for the closing note).

The client (sglops/host/bench_client.py, one thread per request in flight, stdlib http.client) is run as `inv
bench --request-rate R` runs it, through a LocalRemote, against a STAND-IN server on loopback
(sglops/sandbox/standin_server.py) set to answer as fast as it can: 2 output tokens, no TTFT, no pacing. Per
offered rate: the requests completed per second, the client's CPU per request (its process CPU while measuring /
requests: every thread, the JSON parsing, the scheduler), and how late it sent requests (send lag p50 / p99).

The stand-in shares this machine's cores with the client, so at high rates the stand-in's own CPU limits the
achieved rate too; the client's ceiling is read from its CPU per request (one core / CPU per request: the GIL
keeps the client on about one core) and from the send lag, which grows when the client cannot keep the schedule.

    python3 benchmarks/bench_open_loop_client.py --rates 100,250,500,1000 --seconds 3
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from sglops.bench import run as bench
from sglops.core.hosts import load_inventory, local_host
from sglops.core.remote import connect
from sglops.sandbox.standin_local import start_standin


def one(remote, port: int, rate: float, seconds: float, logprobs: bool) -> dict:
    r = bench.run_bench(remote, runs=1, input_len=4, output_len=2, port=port, with_facts=False, request_rate=rate,
                        arrival="constant", duration=seconds, warmup=1, metrics_interval=0,
                        no_logprobs=not logprobs, test_options={"test_token_range": [3, 1000]},
                        request_timeout=60)
    lv = r.levels[0]
    n = lv.requests_total
    cpu = r.client["cpu_s"]
    return {"offered_req_s": rate, "requests": n, "ok": lv.ok, "achieved_req_s": lv.request_throughput["median"],
            "client_cpu_s": round(cpu, 3), "client_cpu_us_per_request": round(cpu / n * 1e6, 1) if n else None,
            "client_cpu_share_of_a_core": round(cpu / r.raw[0]["wall_s"], 3),
            "send_lag_p50_ms": round(lv.send_lag_ms["median"], 2), "send_lag_p99_ms": round(lv.send_lag_ms["p99"], 2),
            "ttft_p50_ms": round(lv.ttft_ms["median"], 2) if lv.ttft_ms else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,250,500,1000")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds of arrivals per rate")
    ap.add_argument("--no-logprobs", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    log = Path(tempfile.mkdtemp(prefix="open-loop-client-")) / "standin.log"
    server = start_standin("--model-path", "m", knobs={"TPS": 1e6, "TTFT_MS": 0, "STARTUP_S": 0.1}, log=log)
    server.wait_healthy(10)
    rows = []
    try:
        with connect(local_host(load_inventory(Path("/nonexistent/hosts.yaml")))) as remote:
            for rate in [float(x) for x in a.rates.split(",")]:
                row = one(remote, server.port, rate, a.seconds, not a.no_logprobs)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        server.stop()
    cpu = [r["client_cpu_us_per_request"] for r in rows if r["client_cpu_us_per_request"]]
    ceiling = 1e6 / max(cpu) if cpu else None
    kept = [r["offered_req_s"] for r in rows if r["achieved_req_s"] >= 0.95 * r["offered_req_s"]
            and r["send_lag_p99_ms"] < 1000 / r["offered_req_s"] * 10]
    print(f"client CPU per request {min(cpu):.0f}-{max(cpu):.0f} us: one core serves at most ~{ceiling:.0f} req/s; "
          f"schedule kept (>= 95% of the offered rate, send lag p99 < 10 gaps) up to "
          f"{max(kept) if kept else 'none'} req/s of {', '.join(f'{r:g}' for r in (x['offered_req_s'] for x in rows))}")
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "ceiling_req_s": ceiling}, indent=1))


if __name__ == "__main__":
    main()
