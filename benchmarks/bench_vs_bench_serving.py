"""`inv bench` vs SGLang's own `bench_serving`, on one real SGLang server, alternated (issue 12 item 4).

One real CPU server (sglops.sandbox.sglang_cpu.start_server: sglang 0.5.23, tiny Llama, vocabulary 1,024).
Per round, API (/generate, /v1/completions) and concurrency, both tools run the same work back to back, in
alternating order (A B, then B A): the same request count, concurrency, input/output lengths (fixed:
`--random-range-ratio 1.0`), input sent as token ids (`--dataset-name random-ids --tokenize-prompt`, the
tokenizer the model folder holds, offline), ignore_eos on, temperature 0, one warm-up request.

Reported per tool: the median over rounds of each figure, the tool's spread against itself over the rounds
((max - min) / median), and sglops / bench_serving. On a machine whose speed swings between runs (2 cores
shared with other work), each run is also set against the server's own decode rate over the same window (its
"gen throughput" log lines per running request): `decode_vs_server` = the tool's decode tok/s / that rate.
Definitions (both read from the sources):
- TTFT, TPOT ((e2e - TTFT) / (n - 1)), e2e, output tok/s (all tokens / wall time): the same definitions.
- decode tok/s: sglops' per-request (n - first chunk's tokens) / (e2e - TTFT), median over requests;
  bench_serving has no such figure, its column is 1000 / median TPOT (equal when the first chunk carries one
  token and the request count is odd).
- ITL: per token on both for /generate (a chunk's gap spread over its tokens); on /v1/completions
  bench_serving records one ITL per text chunk (merged chunks count once), sglops per token (from per-chunk
  usage).
- TTFT on /v1/completions: bench_serving waits for the first chunk with text; sglops for the first chunk that
  raises completion_tokens (a token ending mid-character sends no text). And bench_serving refuses
  `--tokenize-prompt` with `--backend sglang-oai`: its prompt is the ids decoded to text, re-tokenized by the
  server, so its input length is near, not exactly, --input-len (sglops sends the ids).

    python3 benchmarks/bench_vs_bench_serving.py --rounds 3 --requests 7 --input-len 32 --output-len 32

On a server that is already running (the GPU tier: sglang 0.5.17 on an H200, started by `inv restart` or the
play), with that server's python for bench_serving and its model folder for the tokenizer:

    . /tmp/gpu-tier/env.sh && python3 benchmarks/bench_vs_bench_serving.py --port 30000 --python python3 \\
        --model /tmp/gpu-tier/tiny-mla --apis sglang --concurrency 1,8 --rounds 4 --requests 9 \\
        --input-len 128 --output-len 64 --json $OUT/bench_vs_bench_serving.json

bench_serving's module is `sglang.benchmark.serving` since 0.5.17 (`sglang.bench_serving` is its deprecated
alias, and the only name before): the new path is asked first, the old one on releases without it (issue 25
item 5). The summary gives, per figure, the paired per-round ratio sglops / bench_serving (median, range,
spread): the range is the floor of agreement that server allows, whatever either tool does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.bench import run as bench  # noqa: E402
from sglops.bench import stats  # noqa: E402
from sglops.core.hosts import load_inventory, local_host  # noqa: E402
from sglops.core.remote import connect  # noqa: E402
from sglops.core.values import IntList  # noqa: E402
from sglops.sandbox.sglang_cpu import model_dir, start_server, venv_python  # noqa: E402
from sglops.sandbox.sshd import free_port  # noqa: E402

FIGURES = (
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "decode_tok_s",
    "output_tok_s",
    "server_gen_tok_s",
    "decode_vs_server",
    "client_cpu_us_per_token",
)
GEN = re.compile(r"Decode batch, #running-req: (\d+),.*gen throughput \(token/s\): ([\d.]+)")


def server_rate(log: Path | None, offset: int) -> float | None:
    """The server's own per-stream decode rate while a tool ran: median of its "gen throughput" log lines
    (every 40 decode steps) divided by the running requests. A reference both tools share, so a machine that
    slows down for one tool's run and not the other's is seen in each tool's ratio to it."""
    if not log:
        return None
    with open(log, "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode(errors="replace")
    rates = [float(m.group(2)) / int(m.group(1)) for m in GEN.finditer(text) if int(m.group(1))]
    return stats.median(rates) if rates else None


BACKENDS = {"sglang": "sglang", "openai": "sglang-oai"}


def run_sglops(remote, port: int, api: str, c: int, a: argparse.Namespace) -> dict:
    res = bench.run_bench(
        remote,
        runs=1,
        input_len=a.input_len,
        output_len=a.output_len,
        concurrency=c,
        api=api,
        port=port,
        requests=a.requests,
        warmup=1,
        with_facts=False,
        no_logprobs=getattr(a, "no_logprobs", False),
    )
    lv = res.levels[0]
    if lv.status != "ok":
        raise SystemExit(f"sglops run not clean at C={c} {api}: {res.problems()}")
    return {
        "ttft_ms": lv.ttft_ms["median"],
        "tpot_ms": lv.tpot_ms["median"],
        "itl_ms": lv.itl_ms["median"],
        "e2e_ms": lv.e2e_ms["median"],
        "decode_tok_s": lv.decode_tok_s["median"],
        "output_tok_s": (lv.output_tok_s or {}).get("median"),
        "client_cpu_us_per_token": res.client["cpu_us_per_token"],
        "suspect": lv.suspects,
    }


# new path first, the alias on older releases
SERVING_MODULES = ("sglang.benchmark.serving", "sglang.bench_serving")


_FIND = """
import importlib.util, os, sys
spec = importlib.util.find_spec("sglang")
where = list(spec.submodule_search_locations or []) if spec else []
for rel, name in (("benchmark/serving.py", "sglang.benchmark.serving"),
                  ("bench_serving.py", "sglang.bench_serving")):
    if where and os.path.isfile(os.path.join(where[0], rel)):
        print(name)
        sys.exit(0)
print(where[0] if where else "no sglang package")
sys.exit(3)
"""


def find_serving_module(python: str, env: dict | None = None) -> str:
    """Which bench_serving module the SGLang that python sees has: `sglang.benchmark.serving` (0.5.17+) first,
    else the old `sglang.bench_serving`. Found from the package's files, without importing sglang (whose
    __init__ may need what is missing)."""
    proc = subprocess.run(
        [python, "-c", _FIND], capture_output=True, text=True, env=env or os.environ, timeout=120
    )
    answer = proc.stdout.strip()
    if proc.returncode != 0 or answer not in SERVING_MODULES:
        raise SystemExit(f"{python}: no SGLang bench_serving ({answer or proc.stderr.strip()[-200:]})")
    return answer


def serving_module(python: str) -> str:
    """The module to run, checked to import (a missing dependency is one line naming it)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    module = find_serving_module(python, env)
    proc = subprocess.run(
        [python, "-c", f"import {module}"], capture_output=True, text=True, env=env, timeout=600
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise SystemExit(f"{python} cannot import {module}: {last}")
    return module


def run_bench_serving(port: int, api: str, c: int, a: argparse.Namespace, seed: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench-serving-")) / "out.jsonl"
    model = str(a.model)
    argv = [
        a.python,
        "-m",
        a.serving_module,
        "--backend",
        BACKENDS[api],
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--model",
        model,
        "--tokenizer",
        model,
        "--dataset-name",
        "random-ids",
        *(["--tokenize-prompt"] if api == "sglang" else []),
        "--random-input-len",
        str(a.input_len),
        "--random-output-len",
        str(a.output_len),
        "--random-range-ratio",
        "1.0",
        "--num-prompts",
        str(a.requests),
        "--max-concurrency",
        str(c),
        "--request-rate",
        "inf",
        "--warmup-requests",
        "1",
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--output-file",
        str(out),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"bench_serving failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}")
    doc = json.loads(out.read_text().strip().splitlines()[-1])
    if doc["completed"] != a.requests:
        raise SystemExit(f"bench_serving completed {doc['completed']} of {a.requests} requests")
    # its process CPU is mostly imports and tokenizer loading
    return {
        "ttft_ms": doc["median_ttft_ms"],
        "tpot_ms": doc["median_tpot_ms"],
        "itl_ms": doc["median_itl_ms"],
        "e2e_ms": doc["median_e2e_latency_ms"],
        "decode_tok_s": 1000 / doc["median_tpot_ms"],
        "output_tok_s": doc["output_throughput"] if c > 1 else None,
        "client_cpu_us_per_token": None,
    }


def spread(values: list[float]) -> float | None:
    """(max - min) / median; None for one value or a zero median (an ITL of tokens that came in one chunk)."""
    if len(values) < 2 or not stats.median(values):
        return None
    return (max(values) - min(values)) / stats.median(values)


def summarise(runs: list[dict], other: str = "bench_serving") -> list[dict]:
    """Per (api, C, figure): each tool's median over rounds, their ratio, the paired per-round ratios and each
    tool's spread against itself. `other`: the reference tool's key in a run (bench_vllm_agreement: vllm);
    its columns keep the names bench_serving_* whichever tool it is."""
    rows = []
    keys = sorted({(r["api"], r["c"]) for r in runs})
    for api, c in keys:
        for fig in FIGURES:
            mine = [
                r["sglops"].get(fig)
                for r in runs
                if (r["api"], r["c"]) == (api, c) and r["sglops"].get(fig) is not None
            ]
            theirs = [
                r[other].get(fig)
                for r in runs
                if (r["api"], r["c"]) == (api, c) and r[other].get(fig) is not None
            ]
            if not mine or not theirs:
                continue
            paired = [
                r["sglops"][fig] / r[other][fig]
                for r in runs
                if (r["api"], r["c"]) == (api, c) and r["sglops"].get(fig) and r[other].get(fig)
            ]
            rows.append(
                {
                    "api": api,
                    "c": c,
                    "figure": fig,
                    "sglops": stats.median(mine),
                    "bench_serving": stats.median(theirs),
                    "ratio": stats.median(mine) / stats.median(theirs) if stats.median(theirs) else None,
                    "paired_ratios": paired,
                    "paired_median": stats.median(paired) if paired else None,
                    "paired_spread": spread(paired) if paired else None,
                    "sglops_spread": spread(mine),
                    "bench_serving_spread": spread(theirs),
                }
            )
    return rows


def floor_lines(
    rows: list[dict], other: str = "bench_serving", figures=("tpot_ms", "decode_tok_s")
) -> list[str]:
    """Per level, the agreement on TPOT and decode tok/s this
    server allows: the paired per-round ratios' range."""
    out = []
    for r in rows:
        if r["figure"] in figures and r["paired_ratios"]:
            lo, hi = min(r["paired_ratios"]), max(r["paired_ratios"])
            out.append(
                f"{r['api']} C={r['c']} {r['figure']}: sglops / {other} paired per round median "
                f"{r['paired_median']:.4f}, range {lo:.4f}-{hi:.4f} over {len(r['paired_ratios'])} round(s) "
                + (f"(spread {r['paired_spread']:.2%})" if r["paired_spread"] is not None else "(one round)")
                + ": within 1% "
                + (
                    "shown"
                    if lo >= 0.99 and hi <= 1.01
                    else (
                        "not resolvable here; the floor this server allows is"
                        f" +-{max(abs(lo - 1), abs(hi - 1)):.1%}"
                    )
                )
            )
    return out


def print_table(rows: list[dict]) -> None:
    pct = lambda x: "-" if x is None else f"{x:.1%}"  # noqa: E731
    head = (
        f"{'api':7} {'C':>2} {'figure':24} {'sglops':>10} {'bench_serving':>13} {'ratio':>7} "
        f"{'paired ratios':>22} {'self-spread sglops':>19} {'self-spread b_s':>16}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        pr = f"{min(r['paired_ratios']):.3f}-{max(r['paired_ratios']):.3f}" if r["paired_ratios"] else "-"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        print(
            f"{r['api']:7} {r['c']:>2} {r['figure']:24} {r['sglops']:>10.2f} {r['bench_serving']:>13.2f} "
            f"{ratio:>7} {pr:>22} {pct(r['sglops_spread']):>19} {pct(r['bench_serving_spread']):>16}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=7, help="requests per run (odd: medians are one request)")
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--apis", default="sglang,openai")
    ap.add_argument(
        "--port", type=int, help="an SGLang server already running on 127.0.0.1 (default: start one)"
    )
    ap.add_argument(
        "--server-log", type=Path, help="with --port: that server's log (its gen throughput lines)"
    )
    ap.add_argument("--json", type=Path, help="write every run and the summary here")
    ap.add_argument(
        "--python",
        help="the python that runs bench_serving (default: the CPU server's venv python, else this one)",
    )
    ap.add_argument(
        "--model",
        type=Path,
        help=(
            "the served model's folder, for bench_serving's tokenizer (default: the CPU sandbox's tiny model)"
        ),
    )
    a = ap.parse_args()
    if a.python is None:
        a.python = str(venv_python()) if venv_python().exists() else sys.executable
    a.model = a.model or model_dir()
    if not Path(a.model).is_dir():
        raise SystemExit(f"--model {a.model}: no such folder (bench_serving reads its tokenizer there)")
    a.serving_module = serving_module(a.python)
    print(f"bench_serving: {a.python} -m {a.serving_module}", flush=True)
    levels = IntList(1, 4096).check(a.concurrency, "--concurrency")
    apis = [x.strip() for x in a.apis.split(",") if x.strip()]
    server = None
    port = a.port
    log = a.server_log
    if not port:
        port = free_port()
        log = Path(tempfile.mkdtemp(prefix="bench-vs-serving-")) / "server.log"
        print(f"starting a real SGLang server on 127.0.0.1:{port} (log {log})", flush=True)
        server = start_server(port, log, timeout=900)
    runs = []
    try:
        with connect(local_host(load_inventory(REPO / "no-inventory.yaml"))) as remote:
            for rnd in range(a.rounds):
                for combo, (api, c) in enumerate((api, c) for api in apis for c in levels):
                    # each combination alternates which tool goes first from round to round
                    order = (
                        ("sglops", "bench_serving") if (rnd + combo) % 2 == 0 else ("bench_serving", "sglops")
                    )
                    row = {"round": rnd, "api": api, "c": c, "order": list(order)}
                    for tool in order:
                        t0 = time.monotonic()
                        mark = log.stat().st_size if log else 0
                        row[tool] = (
                            run_sglops(remote, port, api, c, a)
                            if tool == "sglops"
                            else run_bench_serving(port, api, c, a, seed=rnd)
                        )
                        row[tool]["wall_s"] = round(time.monotonic() - t0, 2)
                        ref = server_rate(log, mark)
                        row[tool]["server_gen_tok_s"] = ref
                        row[tool]["decode_vs_server"] = row[tool]["decode_tok_s"] / ref if ref else None
                    runs.append(row)
                    print(
                        f"round {rnd} {api} C={c}: sglops TPOT {row['sglops']['tpot_ms']:.2f} ms, "
                        f"bench_serving {row['bench_serving']['tpot_ms']:.2f} ms "
                        f"(order {' -> '.join(order)})",
                        flush=True,
                    )
                    # after every pair: a run cut short by a time limit keeps its rounds
                    save(a, runs)
    finally:
        if server:
            server.stop()
    rows = summarise(runs)
    print()
    print_table(rows)
    print()
    print("\n".join(floor_lines(rows)))
    save(a, runs)


def save(a: argparse.Namespace, runs: list[dict]) -> None:
    """--json: every pair so far, the summary and the floor lines."""
    if a.json:
        rows = summarise(runs)
        a.json.write_text(
            json.dumps(
                {
                    "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
                    "runs": runs,
                    "summary": rows,
                    "floor": floor_lines(rows),
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
