"""Figures for docs/bench.md's production loads: trace-replay send lag, the max-rate search, the GPU
telemetry sampler's cost (issue 40).

`lag`: a trace of constant gaps at 10, 50 and 200 req/s (tests/data/workloads-shaped, made here) replayed by
the host client (`inv bench --dataset trace:...`, the real path: run_bench -> the host script on --host local)
against the stand-in server and the real SGLang 0.5.23 CPU server, levels interleaved; per rate: send lag
(actual - scheduled send time) p50/p99 and the host client's CPU seconds per request (its process time while
measuring / requests), with the client's GIL hand-over interval at its own 0.5 ms and at python's 5 ms
default, interleaved.

    python3 benchmarks/bench_workloads.py lag --seconds 4 --json benchmarks/results/workloads_send_lag.json

`maxrate`: `inv bench --host local --max-rate --slo ... --goodput 0.9` (the CLI itself, a subprocess) against
the real SGLang 0.5.23 CPU server; every probed level (its own run) and the answer, from the recorded
bench.json.

    python3 benchmarks/bench_workloads.py maxrate --slo ttft=1000,tpot=150 --requests 12 --start 1 \\
        --json benchmarks/results/workloads_max_rate.json

`telemetry`: the GPU sampler (sglops/host/telemetry.py) alone for N seconds at 500 and 100 ms: CPU seconds per
second of the nvidia-smi process and of the reader thread, on this machine's stand-in nvidia-smi.

    python3 benchmarks/bench_workloads.py telemetry --seconds 10 --rounds 2 \\
        --json benchmarks/results/workloads_telemetry.json
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
# the host client's GIL interval while measuring (its own), and python's default
SWITCHES = (0.0005, 0.005)


def constant_trace(path: Path, rate: float, seconds: float) -> Path:
    """A mooncake-layout trace of constant gaps at `rate`
    (ms timestamps), 4-token prompts, 2-token outputs."""
    n = max(1, int(rate * seconds))
    path.write_text(
        "".join(
            json.dumps({"timestamp": round(i * 1000.0 / rate, 3), "input_length": 4, "output_length": 2})
            + "\n"
            for i in range(n)
        )
    )
    return path


def lag_level(remote, port: int, trace: Path, test_options: dict | None) -> dict:
    r = bench.run_bench(
        remote,
        runs=1,
        port=port,
        with_facts=False,
        warmup=1,
        dataset=f"trace:{trace}",
        test_options=test_options,
        request_timeout=60,
    )
    (lv,) = r.levels
    n = lv.requests_total
    return {
        "requests": n,
        "ok": lv.ok,
        "lag_p50_ms": lv.send_lag_ms["median"],
        "lag_p99_ms": lv.send_lag_ms["p99"],
        "lag_max_ms": lv.send_lag_ms["max"],
        "client_cpu_ms_per_request": r.client["cpu_s"] / n * 1e3,
        "wall_s": r.raw[0]["wall_s"],
    }


def lag(a: argparse.Namespace) -> dict:
    from sglops.sandbox.sglang_cpu import start_server
    from sglops.sandbox.standin_local import start_standin

    tmp = Path(tempfile.mkdtemp(prefix="workloads-"))
    traces = {rate: constant_trace(tmp / f"trace-{rate}.jsonl", rate, a.seconds) for rate in RATES}
    servers = {
        "standin": start_standin(
            "--model-path", "m", knobs={"TPS": 2000, "TTFT_MS": 2, "STARTUP_S": 0.1}, log=tmp / "standin.log"
        )
    }
    servers["standin"].wait_healthy(10)
    if not a.no_real:
        servers["sglang-cpu"] = start_server(free_port(), tmp / "server.log", timeout=900)
    out: dict = {
        "rates": list(RATES),
        "seconds": a.seconds,
        "loadavg_before": open("/proc/loadavg").read().split()[:3],
        "cpus": os.cpu_count(),
        "rounds": a.rounds,
        "servers": {},
    }
    try:
        with connect(local_host(load_inventory(REPO / "no-inventory.yaml"))) as remote:
            for rnd in range(a.rounds):
                # interleaved: each rate on both servers, both GIL intervals, before the next
                for rate in RATES:
                    for name, server in servers.items():
                        for switch in SWITCHES:
                            opts = {
                                "test_switch_interval": switch,
                                **({"test_token_range": [3, 1000]} if name == "standin" else {}),
                            }
                            fig = lag_level(remote, server.port, traces[rate], opts)
                            key = f"{name} switch {switch * 1e3:g} ms"
                            out["servers"].setdefault(key, {}).setdefault(str(rate), []).append(fig)
                            print(
                                f"round {rnd + 1} {key} {rate} req/s: lag p50 {fig['lag_p50_ms']:.3f} ms p99"
                                f" {fig['lag_p99_ms']:.3f} ms, client {fig['client_cpu_ms_per_request']:.3f}"
                                f" ms CPU/req; load {open('/proc/loadavg').read().split()[0]}",
                                flush=True,
                            )
    finally:
        for server in servers.values():
            server.stop()
    out["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    return out


def maxrate(a: argparse.Namespace) -> dict:
    import subprocess

    from sglops.sandbox.sglang_cpu import start_server

    tmp = Path(tempfile.mkdtemp(prefix="workloads-maxrate-"))
    server = start_server(free_port(), tmp / "server.log", timeout=900)
    env = {**os.environ, "SGLOPS_ARTIFACTS": str(tmp / "artifacts"), "PYTHONPATH": str(REPO)}
    argv = [
        sys.executable,
        "-m",
        "invoke",
        "bench",
        "--host",
        "local",
        "--port",
        str(server.port),
        "--max-rate",
        "--slo",
        a.slo,
        "--goodput",
        str(a.goodput),
        "--input-len",
        "16",
        "--output-len",
        "16",
        "--runs",
        "1",
        "--requests",
        str(a.requests),
        "--request-rate",
        str(a.start),
        "--warmup",
        "1",
    ]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    finally:
        server.stop()
    print(proc.stdout[-6000:], proc.stderr[-3000:], sep="\n")
    found = sorted((tmp / "artifacts").rglob("bench.json"), key=lambda p: len(p.parent.name))
    doc = json.loads(found[0].read_text()) if found else {}
    return {
        "argv": argv[2:],
        "exit": proc.returncode,
        "wall_s": round(time.monotonic() - t0, 1),
        "loadavg_after": open("/proc/loadavg").read().split()[:3],
        "search": doc.get("max_rate"),
        "levels": [
            {
                "rate": lv.get("request_rate"),
                "status": lv.get("status"),
                "requests": lv.get("requests"),
                "goodput_share": (lv.get("goodput") or {}).get("share"),
                "ttft_p99_ms": (lv.get("ttft_ms") or {}).get("p99"),
                "tpot_p99_ms": (lv.get("tpot_ms") or {}).get("p99"),
                "output_tok_s": (lv.get("output_tok_s") or {}).get("median"),
            }
            for lv in doc.get("levels") or []
        ],
    }


def telemetry(a: argparse.Namespace) -> dict:
    """The sampler alone at each interval, interleaved over the rounds: its CPU seconds per second (the
    nvidia-smi process and the reader thread apart). On this machine nvidia-smi is the sandbox's stand-in (a
    shell script that forks `sleep` per sample): its process cost is the stand-in's, the reader's is sglops'
    own."""
    from sglops.host import telemetry as tel

    os.environ["PATH"] = f"{REPO / 'sglops/sandbox/bin'}:{os.environ['PATH']}"
    out: dict = {
        "seconds": a.seconds,
        "loadavg_before": open("/proc/loadavg").read().split()[:3],
        "intervals": {},
    }
    for _ in range(a.rounds):
        for ms in (500, 100):
            sampler = tel.Sampler(ms).start()
            time.sleep(a.seconds)
            got = sampler.stop()
            out["source"] = got["source"]
            out["intervals"].setdefault(str(ms), []).append(
                {**got["sampler"], "samples": len(got["samples"])}
            )
            print(ms, got["sampler"], flush=True)
    out["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("lag", "maxrate", "telemetry"))
    ap.add_argument("--slo", default="ttft=300,tpot=60")
    ap.add_argument("--goodput", type=float, default=0.9)
    ap.add_argument("--start", type=float, default=1.0, help="maxrate: the first rate probed (req/s)")
    ap.add_argument("--requests", type=int, default=12, help="maxrate: requests per probed level")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--interval-ms", type=int, default=500)
    ap.add_argument("--no-real", action="store_true", help="lag: the stand-in only")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    out = {"lag": lag, "maxrate": maxrate, "telemetry": telemetry}[a.what](a)
    text = json.dumps(out, indent=1)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
