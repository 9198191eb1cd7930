"""Open-loop bench client: its CPU per request, the achieved vs offered rate, and the rate where it saturates
(issue 26: figure for the closing note).

The client (sglops/host/bench_client.py: one thread per request in flight, one new loopback connection per
request as bench_serving opens) runs as `inv bench --request-rate R --arrival constant` runs it, through a
LocalRemote, against a STAND-IN server on loopback (sglops/sandbox/standin_server.py, listen backlog 2048) set
to answer at once: 2 output tokens, no TTFT, no pacing. The stand-in's figures are not SGLang's: it only has
to answer faster than the client asks. Per offered rate, one bench run of `--seconds` of arrivals:

- achieved req/s (completed / wall), requests sent, ok, errors (outcome: count, first message);
- client CPU per request (its process CPU while measuring / requests sent: every thread, the sockets, JSON)
  and as a share of one core; the stand-in's CPU share over the same run (from /proc), the load average after;
- send lag p50 / p99 (how late the client sent requests against the schedule), and each request's e2e p50 /
  p99 / max (a stall at the server or in the kernel lowers the achieved rate with no send lag: the e2e tail
  shows it).

A rate is KEPT when >= 95% of it was achieved, nothing failed and the median send lag stayed under 10 gaps
(10 / rate): a client that cannot keep up falls further behind with every request (hundreds of gaps within a
second), while one that keeps up is late only by the machine's scheduling jitter (about a ms here, under
load). The p99 is shown, not judged: on a shared machine one preemption of tens of ms puts it over any few-gap
bound. The first rate not kept is where the run saturated, and who: the client when its send lag failed (at
its own limit when it used >= 70% of a core, as much as the GIL lets a process of many threads use; else
starved by the shared machine), the server side or the machine when requests left on time but responses queued
(e2e grows). The CPU shares and the load average are printed either way. `1 / CPU per request` (its highest at
>= 1,000 offered: the cost rises with the threads in flight) is the client's ceiling on one free core.

    python3 benchmarks/bench_open_loop_client.py --rates 100,250,500,750,1000,1500,2000,3000 --seconds 2
    # cProfile (CPU time), every thread
    python3 benchmarks/bench_open_loop_client.py --profile 1000 --seconds 2
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from sglops.bench import run as bench
from sglops.bench import stats
from sglops.core.hosts import load_inventory, local_host
from sglops.core.remote import connect
from sglops.sandbox.standin_local import StandinProcess, start_standin

KEEP_SHARE, KEEP_LAG_GAPS, CLIENT_BOUND = 0.95, 10, 0.7
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, every thread (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def one(remote, server: StandinProcess, rate: float, seconds: float, logprobs: bool) -> dict:
    """One bench run at `rate`: what the client achieved and what it and the stand-in spent."""
    srv0, wall0 = cpu_s(server.proc.pid), time.perf_counter()
    r = bench.run_bench(
        remote,
        runs=1,
        input_len=4,
        output_len=2,
        port=server.port,
        with_facts=False,
        request_rate=rate,
        arrival="constant",
        duration=seconds,
        warmup=1,
        metrics_interval=0,
        no_logprobs=not logprobs,
        test_options={"test_token_range": [3, 1000]},
        request_timeout=60,
    )
    srv, wall = cpu_s(server.proc.pid) - srv0, time.perf_counter() - wall0
    lv, measured = r.levels[0], r.raw[0]["wall_s"]
    n, cpu = lv.requests_total, r.client["cpu_s"]
    bad = {k: v for k, v in lv.outcomes.items() if k != "ok"}
    e2e = stats.summary([rec["e2e_s"] * 1e3 for rec in r.raw[0]["requests"] if rec.get("e2e_s") is not None])
    return {
        "offered_req_s": rate,
        "sent": n,
        "ok": lv.ok,
        "errors": bad,
        "first_error": lv.errors[0] if bad else None,
        "achieved_req_s": round(lv.ok / measured, 1),
        "client_cpu_ms_per_request": round(cpu / n * 1e3, 3) if n else None,
        "client_cpu_share_of_a_core": round(cpu / measured, 3),
        # the whole bench run (start, warm-up): an upper bound
        "standin_cpu_share": round(srv / wall, 3),
        "send_lag_p50_ms": round(lv.send_lag_ms["median"], 2),
        "send_lag_p99_ms": round(lv.send_lag_ms["p99"], 2),
        # a request's own time: a tail here (a stalled accept) lowers the achieved rate with no send lag
        "e2e_p50_ms": round(e2e["median"], 2) if e2e else None,
        "e2e_p99_ms": round(e2e["p99"], 2) if e2e else None,
        "e2e_max_ms": round(e2e["max"], 1) if e2e else None,
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }


def kept(row: dict) -> bool:
    rate = row["offered_req_s"]
    return (
        row["achieved_req_s"] >= KEEP_SHARE * rate
        and not row["errors"]
        and row["send_lag_p50_ms"] < KEEP_LAG_GAPS * 1e3 / rate
    )


def verdict(rows: list[dict]) -> dict:
    """The highest rate kept, the first one not kept and
    who saturated there, the client's one-core ceiling."""
    held = [r["offered_req_s"] for r in rows if kept(r)]
    missed = next((r for r in rows if not kept(r)), None)
    per_req = [r["client_cpu_ms_per_request"] for r in rows if r["client_cpu_ms_per_request"]]
    busy = [r for r in rows if r["offered_req_s"] >= 1000 and r["client_cpu_ms_per_request"]] or rows[-1:]
    # per-request cost rises with threads
    worst = max(busy, key=lambda r: r["client_cpu_ms_per_request"] or 0)
    out = {
        "kept_up_to_req_s": max(held) if held else None,
        "saturated_at_req_s": None,
        "bottleneck": None,
        "client_cpu_ms_per_request": [min(per_req), max(per_req)] if per_req else None,
        "client_ceiling_req_s": (
            round(1e3 / worst["client_cpu_ms_per_request"]) if worst["client_cpu_ms_per_request"] else None
        ),
        "ceiling_from_req_s": worst["offered_req_s"],
    }
    if missed:
        out.update(
            saturated_at_req_s=missed["offered_req_s"],
            achieved_there=missed["achieved_req_s"],
            bottleneck=bottleneck(missed),
        )
    return out


def bottleneck(row: dict) -> str:
    """Who failed the schedule at a rate not kept: the client sending late (its own CPU, or starved by the
    shared machine), or the server side (sent on time, but the responses queued), or errors."""
    client, server = row["client_cpu_share_of_a_core"], row["standin_cpu_share"]
    shares = (
        f"client {client:.2f} core, stand-in {server:.2f}, load {row['load_avg_1m']} on {os.cpu_count()} "
        "cores"
    )
    if row["errors"]:
        return f"errors ({row['first_error']}); {shares}"
    if row["send_lag_p50_ms"] >= KEEP_LAG_GAPS * 1e3 / row["offered_req_s"]:
        if client >= CLIENT_BOUND:
            return (
                f"the client: it sends late (median lag {row['send_lag_p50_ms']:g} ms) at ~one core (GIL);"
                f" {shares}"
            )
        return (
            f"the client, starved by the shared machine: it sends late (median lag {row['send_lag_p50_ms']:g}"
            f" ms) with less than one core; {shares}"
        )
    return (
        f"the server side or the machine: sent on time, responses queued (e2e p50 {row['e2e_p50_ms']} ms);"
        f" {shares}"
    )


def profile(port: int, rate: float, seconds: float, top: int) -> str:
    """cProfile the client in this process at `rate` (CPU time per thread, every thread merged): where a
    request's CPU goes. Profiling slows the client (roughly 2x): read shares, not absolute times."""
    import cProfile
    import io
    import pstats
    import threading

    from sglops.host import bench_client

    profs, orig = [], threading.Thread.run

    # every thread the client starts gets its own profiler
    def run(self):
        p = cProfile.Profile(time.thread_time)
        profs.append(p)
        p.enable()
        try:
            orig(self)
        finally:
            p.disable()

    threading.Thread.run = run
    bench_client.progress = lambda **kw: None
    main = cProfile.Profile(time.thread_time)
    from sglops.bench.plan import plan_bench

    flags = {
        "port": port,
        "runs": 1,
        "input_len": 4,
        "output_len": 2,
        "request_rate": rate,
        "duration": seconds,
        "arrival": "constant",
        "metrics_interval": 0,
    }
    args = {**plan_bench(flags).host_args(), "request_timeout": 60, "seed": 0, "test_token_range": [3, 1000]}
    try:
        main.enable()
        raw = bench_client.main(args)
        main.disable()
    finally:
        threading.Thread.run = orig
    sent = sum(len(rep["requests"]) for rep in raw["repeats"])
    text = io.StringIO()
    stats = pstats.Stats(main, stream=text)
    for p in profs:
        stats.add(p)
    text.write(
        f"{sent} requests at {rate:g} req/s offered; client CPU while measuring {raw['client_cpu_s']:.3f} s "
        f"({raw['client_cpu_s'] / sent * 1e3:.3f} ms per request, under the profiler)\n"
    )
    stats.sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,250,500,750,1000,1500,2000,3000")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds of arrivals per rate")
    ap.add_argument("--no-logprobs", action="store_true")
    ap.add_argument("--profile", type=float, metavar="RATE", help="cProfile the client at RATE instead")
    ap.add_argument("--top", type=int, default=30, help="functions the profile lists")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    try:
        rates = [float(x) for x in a.rates.split(",")]
    except ValueError:
        ap.error(f"--rates must be numbers like 100,1000 (got {a.rates!r})")
    if a.seconds <= 0 or any(r <= 0 for r in rates) or (a.profile is not None and a.profile <= 0):
        ap.error("--seconds, --rates and --profile must be positive")
    log = Path(tempfile.mkdtemp(prefix="open-loop-client-")) / "standin.log"
    server = start_standin("--model-path", "m", knobs={"TPS": 1e6, "TTFT_MS": 0, "STARTUP_S": 0.1}, log=log)
    rows: list[dict] = []
    try:
        server.wait_healthy(10)
        if a.profile:
            print(profile(server.port, a.profile, a.seconds, a.top))
            return
        with connect(local_host(load_inventory(Path("/nonexistent/hosts.yaml")))) as remote:
            for rate in rates:
                rows.append(one(remote, server, rate, a.seconds, not a.no_logprobs))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.stop()
    v = verdict(rows)
    print(json.dumps(v))
    print(
        "STAND-IN server (its figures are not SGLang's); client CPU"
        f" {v['client_cpu_ms_per_request'][0]:.3f}-{v['client_cpu_ms_per_request'][1]:.3f} ms per request"
        f" (one core: ~{v['client_ceiling_req_s']} req/s at its cost at {v['ceiling_from_req_s']:g} offered);"
        f" schedule kept up to {v['kept_up_to_req_s']} req/s; "
        + (
            f"saturated at {v['saturated_at_req_s']:g} (achieved {v['achieved_there']:g}): {v['bottleneck']}"
            if v["saturated_at_req_s"]
            else "not saturated at the rates tried"
        )
    )
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "verdict": v, "cores": os.cpu_count()}, indent=1))


if __name__ == "__main__":
    main()
