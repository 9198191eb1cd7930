"""Figures for docs/bench.md's production loads (issue 40): trace-replay send lag, the max-rate search, the GPU
telemetry sampler's cost.

`lag`: a trace of constant gaps at 10, 50 and 200 req/s (tests/data/workloads-shaped, made here) replayed by the
host client (`inv bench --dataset trace:...`, the real path: run_bench -> the host script on --host local) against
the stand-in server and the real SGLang 0.5.23 CPU server, levels interleaved; per rate: send lag (actual - scheduled
send time) p50/p99 and the host client's CPU seconds per request (its process time while measuring / requests), with
the client's GIL hand-over interval at its own 0.5 ms and at python's 5 ms default, interleaved.

    python3 benchmarks/bench_workloads.py lag --seconds 4 --json benchmarks/results/workloads_send_lag.json

`telemetry`: the GPU sampler (sglops/host/telemetry.py) alone for N seconds at its interval: CPU seconds per second of
the sampler process (its own and its nvidia-smi child's), on this machine's stand-in nvidia-smi.

    python3 benchmarks/bench_workloads.py telemetry --seconds 10 --json benchmarks/results/workloads_telemetry.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.bench import run as bench  # noqa: E402
from sglops.core.hosts import load_inventory, local_host  # noqa: E402
from sglops.core.remote import connect  # noqa: E402
from sglops.sandbox.sshd import free_port  # noqa: E402

RATES = (10, 50, 200)
SWITCHES = (0.0005, 0.005)  # the host client's GIL interval while measuring (its own), and python's default


def constant_trace(path: Path, rate: float, seconds: float) -> Path:
    """A mooncake-layout trace of constant gaps at `rate` (ms timestamps), 4-token prompts, 2-token outputs."""
    n = max(1, int(rate * seconds))
    path.write_text("".join(json.dumps({"timestamp": round(i * 1000.0 / rate, 3), "input_length": 4,
                                        "output_length": 2}) + "\n" for i in range(n)))
    return path


def lag_level(remote, port: int, trace: Path, test_options: dict | None) -> dict:
    r = bench.run_bench(remote, runs=1, port=port, with_facts=False, warmup=1, dataset=f"trace:{trace}",
                        test_options=test_options, request_timeout=60)
    (lv,) = r.levels
    n = lv.requests_total
    return {"requests": n, "ok": lv.ok, "lag_p50_ms": lv.send_lag_ms["median"], "lag_p99_ms": lv.send_lag_ms["p99"],
            "lag_max_ms": lv.send_lag_ms["max"], "client_cpu_ms_per_request": r.client["cpu_s"] / n * 1e3,
            "wall_s": r.raw[0]["wall_s"]}


def lag(a: argparse.Namespace) -> dict:
    from sglops.sandbox.sglang_cpu import start_server
    from sglops.sandbox.standin_local import start_standin

    tmp = Path(tempfile.mkdtemp(prefix="workloads-"))
    traces = {rate: constant_trace(tmp / f"trace-{rate}.jsonl", rate, a.seconds) for rate in RATES}
    servers = {"standin": start_standin("--model-path", "m", knobs={"TPS": 2000, "TTFT_MS": 2, "STARTUP_S": 0.1},
                                        log=tmp / "standin.log")}
    servers["standin"].wait_healthy(10)
    if not a.no_real:
        servers["sglang-cpu"] = start_server(free_port(), tmp / "server.log", timeout=900)
    out: dict = {"rates": list(RATES), "seconds": a.seconds, "loadavg_before": open("/proc/loadavg").read().split()[:3],
                 "cpus": os.cpu_count(), "rounds": a.rounds, "servers": {}}
    try:
        with connect(local_host(load_inventory(REPO / "no-inventory.yaml"))) as remote:
            for rnd in range(a.rounds):
                for rate in RATES:  # interleaved: each rate on both servers, both GIL intervals, before the next
                    for name, server in servers.items():
                        for switch in SWITCHES:
                            opts = {"test_switch_interval": switch,
                                    **({"test_token_range": [3, 1000]} if name == "standin" else {})}
                            fig = lag_level(remote, server.port, traces[rate], opts)
                            key = f"{name} switch {switch * 1e3:g} ms"
                            out["servers"].setdefault(key, {}).setdefault(str(rate), []).append(fig)
                            print(f"round {rnd + 1} {key} {rate} req/s: lag p50 {fig['lag_p50_ms']:.3f} ms p99 "
                                  f"{fig['lag_p99_ms']:.3f} ms, client {fig['client_cpu_ms_per_request']:.3f} ms "
                                  f"CPU/req; load {open('/proc/loadavg').read().split()[0]}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    out["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    return out


def telemetry(a: argparse.Namespace) -> dict:
    from sglops.host import telemetry as tel

    env = {**os.environ, "PATH": f"{REPO / 'sglops/sandbox/bin'}:{os.environ['PATH']}"}
    os.environ.update(env)
    sampler = tel.Sampler(a.interval_ms).start()
    time.sleep(a.seconds)
    summary = sampler.stop()
    return {"interval_ms": a.interval_ms, "seconds": a.seconds, "loadavg": open("/proc/loadavg").read().split()[:3],
            "sampler": summary.get("sampler"), "source": summary.get("source"), "samples": summary.get("samples")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("lag", "telemetry"))
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--interval-ms", type=int, default=500)
    ap.add_argument("--no-real", action="store_true", help="lag: the stand-in only")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    out = lag(a) if a.what == "lag" else telemetry(a)
    text = json.dumps(out, indent=1)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
