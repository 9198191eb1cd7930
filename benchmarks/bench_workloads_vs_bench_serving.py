"""`inv bench`'s trace replay and multi-turn sessions vs SGLang's bench_serving, one real server, alternated
(issue 40 item 6).

The model is benchmarks/bench_vs_bench_serving.py (its helpers are imported): per round and workload both
tools run the same work back to back, in alternating order (A B, then B A), the server's prefix cache flushed
before each tool's run, and the paired per-round ratio sglops / bench_serving of the TTFT and TPOT medians is
reported (median, range).

What bench_serving does (read in 0.5.23's installed source and 0.5.17's release tree: the mooncake generator
is the same file; generated-shared-prefix differs only by 0.5.23's token-id mode, which refuses multi-turn)
and how sglops' side is shaped to the same work:

- **trace** - `--dataset-name mooncake --dataset-path TRACE --mooncake-num-rounds 1 --mooncake-slowdown-factor
  F` (backend `sglang`, /generate, text prompts): each record is sent at `timestamp` ms x F. Its prompt does
  NOT have the record's `input_length`: it is built from `hash_ids` alone, per id the id's digits then 128 x
  "hi" (~129 tokens, not the 512 the trace's blocks stand for), then "Tell me a story based on this context.",
  wrapped as the user message "Round 1: ..." through the tokenizer's chat template ("user: ..." where it has
  none); the output is `output_length` tokens (ignore_eos, temperature 0). So the same trace file cannot give
  the same work to sglops' `trace:` layouts (which honour `input_length` with 512-token blocks). This script
  therefore runs bench_serving's own generator (imported from the installed sglang, in bench_serving's python,
  unmodified, with no sleeping) over the trace, tokenizes each prompt with the model's tokenizer exactly as
  the server's /generate does (`tokenizer.encode(text)`) and writes the same requests as a `timed_trace` file
  with `prompt` (the same text; `--trace-prompts ids`: `prompt_ids`, the tokenizer's ids) (timestamps in ms,
  `unit=ms`): sglops replays THAT with `--trace-speed 1/F` on /generate.
  Same timestamps, same prompt tokens, same output lengths, same prefix sharing. bench_serving 0.5.17 (the GPU
  tier's release) cannot replay a mooncake trace at all: `benchmark()` reads `input_requests[0].prompt` to
  detect multi-turn before it knows the rows are the trace's raw dicts (serving.py:1354, AttributeError before
  any request; 0.5.23 checks for mooncake first). `--trace-client DIR` then runs another release's unmodified
  `sglang/benchmark/` (0.5.23's: its mooncake generator is the same file) over the installed sglang.
- **sessions** - `--dataset-name generated-shared-prefix --gsp-num-turns T` (multi-turn needs a chat backend:
  `sglang-oai-chat`, /v1/chat/completions): G groups x P sessions, each of T turns; turn 1 is the group's
  system prompt (S random tokens decoded to text), "\\n\\n" and a question (Q tokens), later turns a new
  question each, and every turn sends the whole conversation with the server's previous answers (as text); O
  output tokens per turn (ignore_eos, temperature 0), `--max-concurrency C` sessions at once, turns
  sequential. sglops (default `--session-api openai-chat`): `--api openai-chat` with
  `sessions:texts=FILE,count=P,turns=T`, FILE holding bench_serving's own texts of that round's seed
  (generated here by its generator, in its order): the same user messages (the first one system text +
  "\\n\\n" + question, no system message, as bench_serving sends it), the server's answers carried as
  assistant messages (their text, as bench_serving carries them), `--output-len O --concurrency C`, streamed
  on the same endpoint. So
  both tools give the server the same conversations; each request's prompt length (the server's count:
  bench_serving's `--output-details` input_lens, sglops' usage) is compared per round (`same_prompt_lens`).
  What stays different on this path: sglops asks for per-chunk usage (continuous_usage_stats), the chosen
  tokens' logprobs (unless --no-logprobs) and SGLang's `sglext` output ids and cache counts at the end. With
  a template that adds nothing (`--chat-template` CONCAT_TEMPLATE: the contents back to back), the old paths
  stay: `--session-api openai` (/v1/completions) or `sglang` (/generate) send `sessions:count=P,turns=T,
  system=S,new=Q` as token ids shaped to bench_serving's sizes (its random text re-tokenizes to about, not
  exactly, S and Q tokens), the answers' ids carried exactly: the same sizes, not the same endpoint.

Both tools send one warm-up (sglops: C random prompts; bench_serving: the first session / a 512-"hi" prompt)
and bench_serving flushes the cache after it (`--flush-cache`); this script flushes before each tool's run, so
both measure from a cold cache. The server's own prefill counters over each tool's run (its "Prefill batch"
log lines: new + cached tokens, warm-ups included: they differ by the warm-ups' sizes) show whether the work
is the same size. sglops asks for the chosen tokens' logprobs unless `--no-logprobs` and samples GPU telemetry
on the host every 500 ms unless `--telemetry-interval 0` (bench_serving does neither).

    # the real CPU server (started here, with --chat-template CONCAT_TEMPLATE)
    python3 benchmarks/bench_workloads_vs_bench_serving.py --rounds 2 --trace-requests 6 \\
        --sessions 2,2,32,16,8 --session-concurrency 2

On the GPU tier (a server started with `--chat-template benchmarks/results/workloads-agreement-2026-12-06/
concat.jinja`), with that server's python for bench_serving and its model folder for the tokenizer:

    . /tmp/gpu-tier/env.sh && python3 benchmarks/bench_workloads_vs_bench_serving.py --port 30000 \\
        --server-log /tmp/gpu-tier/server.log --python python3 --model /tmp/gpu-tier/tiny-mla --rounds 4 \\
        --trace-client overlay --json $OUT/workloads_vs_bench_serving.json

    # the sessions alone, both tools on the chat endpoint (the default --session-api openai-chat)
    . /tmp/gpu-tier/env.sh && python3 benchmarks/bench_workloads_vs_bench_serving.py --port 30000 \\
        --server-log /tmp/gpu-tier/server.log --python python3 --model /tmp/gpu-tier/tiny-mla \\
        --workloads sessions --rounds 4 --no-logprobs --telemetry-interval 0 \\
        --json $OUT/sessions_chat_vs_bench_serving.json

(`overlay/sglang/benchmark/`: 0.5.23's installed folder, copied unmodified; the device call and its figures:
benchmarks/results/workloads-agreement-2026-12-06/README.md.)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from bench_vs_bench_serving import server_rate, serving_module, spread  # noqa: E402

from sglops.bench import run as bench  # noqa: E402
from sglops.bench import stats  # noqa: E402
from sglops.core.hosts import load_inventory, local_host  # noqa: E402
from sglops.core.remote import connect  # noqa: E402
from sglops.sandbox.sglang_cpu import model_dir, start_server, venv_python  # noqa: E402
from sglops.sandbox.sshd import free_port  # noqa: E402

RESULTS = HERE / "results" / "workloads-agreement-2026-12-06"
DEFAULT_TRACE = RESULTS / "mooncake_synthetic.jsonl"
CONCAT_TEMPLATE = RESULTS / "concat.jinja"
FIGURES = ("ttft_ms", "tpot_ms", "e2e_ms", "server_gen_tok_s", "prefill_new_tokens", "prefill_cached_tokens")
PREFILL = re.compile(r"Prefill batch.*?#new-token: (\d+), #cached-token: (\d+)")
# Runs `sglang.benchmark.serving` from another release's unmodified `sglang/benchmark/` folder (argv[1]) over
# the installed sglang (its sglang.srt): bench_serving 0.5.17's mooncake mode stops before sending
# (serving.py:1354 reads `.prompt` of the trace's raw dicts), 0.5.23's runs the same generator
# (datasets/mooncake.py unchanged).
_OVERLAY = """
import importlib.util, os, runpy, sys
import sglang
sglang.__path__.insert(0, os.path.join(sys.argv.pop(1), "sglang"))
sys.argv[0] = importlib.util.find_spec("sglang.benchmark.serving").origin
print("bench_serving from", sys.argv[0], file=sys.stderr)
runpy.run_module("sglang.benchmark.serving", run_name="__main__", alter_sys=True)
"""
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}

# Run in bench_serving's python: its own mooncake generator over the trace, slowdown 0 (no sleeping), each
# prompt tokenized as the server's /generate tokenizes text. Prints one JSON line per request.
_DERIVE = """
import asyncio, json, sys
from transformers import AutoTokenizer
from sglang.benchmark.datasets.mooncake import get_mooncake_request_over_time
path, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path) as fh:
    records = [json.loads(line) for line in fh if line.strip()][:n]
tok = AutoTokenizer.from_pretrained(model)
times = sorted(r["timestamp"] for r in records)
async def main():
    k = 0
    async for row in get_mooncake_request_over_time(records, tok, 0.0, 1):
        ids = tok.encode(row.prompt)
        print(json.dumps({"timestamp": times[k], "input_length": len(ids), "output_length": row.output_len,
                          "prompt_ids": ids, "prompt": row.prompt}))
        k += 1
asyncio.run(main())
"""

# Run in bench_serving's python: its own generated-shared-prefix sessions for each seed (seeded as its
# run_benchmark seeds random and numpy), in the order it sends them, each turn's new text tokenized as the
# server's chat path tokenizes the rendered template (no special tokens). Prints {seed: {"tokens": [first
# turn tokens, question tokens of later turns...] per session, "texts": [the turns' texts] per session}}.
_GSP = """
import json, random, sys
import numpy as np
from transformers import AutoTokenizer
from sglang.benchmark.datasets.generated_shared_prefix import sample_generated_shared_prefix_requests
model, p, t, s, q, o = sys.argv[1], *map(int, sys.argv[2:7])
tok = AutoTokenizer.from_pretrained(model)
out = {}
for seed in map(int, sys.argv[7:]):
    random.seed(seed)
    np.random.seed(seed)
    rows = sample_generated_shared_prefix_requests(
        num_groups=1, prompts_per_group=p, system_prompt_len=s, question_len=q, output_len=o,
        range_ratio=1.0, tokenizer=tok, seed=seed, num_turns=t,
    )
    turns = [r.prompt if isinstance(r.prompt, list) else [r.prompt] for r in rows]
    out[seed] = {
        "tokens": [[len(tok.encode(x, add_special_tokens=False)) for x in conv] for conv in turns],
        "texts": turns,
    }
print(json.dumps(out))
"""


def make_trace(path: Path, requests: int, rate: float, seed: int) -> None:
    """A synthetic trace in the mooncake layout (no real one can be fetched offline): Poisson arrivals at
    `rate`, six conversations whose prompts grow by one 512-token block per turn (their earlier blocks shared,
    as in mooncake's conversation trace), outputs of 8-48 tokens."""
    rng = random.Random(seed)
    convs: list[list[int]] = [[] for _ in range(6)]
    nxt, t, lines = 0, 0.0, []
    for _ in range(requests):
        c = rng.randrange(len(convs))
        if len(convs[c]) >= 6:
            convs[c] = []
        convs[c].append(nxt)
        nxt += 1
        ids = list(convs[c])
        lines.append(
            {
                "timestamp": round(t),
                "input_length": (len(ids) - 1) * 512 + rng.randint(64, 512),
                "output_length": rng.randint(8, 48),
                "hash_ids": ids,
            }
        )
        t += rng.expovariate(rate) * 1000
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def derive_trace(a: argparse.Namespace) -> Path:
    """bench_serving's mooncake requests for the first
    --trace-requests records, as a timed_trace file of ids."""
    env = {**os.environ, **OFFLINE}
    proc = subprocess.run(
        [a.python, "-c", _DERIVE, str(a.trace), str(a.model), str(a.trace_requests)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    rows = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not rows:
        raise SystemExit(f"deriving bench_serving's mooncake prompts failed: {proc.stderr.strip()[-1500:]}")
    out = Path(tempfile.mkdtemp(prefix="workloads-trace-")) / "derived.jsonl"
    # sglops sends what bench_serving sends: the text (the server tokenizes it inside TTFT), or the ids
    drop = "prompt_ids" if a.trace_prompts == "text" else "prompt"
    out.write_text("".join(json.dumps({k: v for k, v in r.items() if k != drop}) + "\n" for r in rows))
    a.derived_stats = {
        "requests": len(rows),
        "prompt_tokens": sum(r["input_length"] for r in rows),
        "output_tokens": sum(r["output_length"] for r in rows),
        "span_ms": rows[-1]["timestamp"] - rows[0]["timestamp"],
    }
    print(f"trace: {a.trace} -> {out}: {a.derived_stats}", flush=True)
    return out


def derive_sessions(a: argparse.Namespace) -> None:
    """bench_serving's own sessions of each round's seed: their texts (a `sessions:texts=` file per seed: what
    sglops sends on the chat endpoint) and, for the ids paths, sglops' session shape: system = the first
    turn's tokens less its question's, new = the median question's tokens (the random text re-tokenizes to
    about, not exactly, --gsp-system-prompt-len and --gsp-question-len)."""
    p, t, s, q, o = a.session_shape
    proc = subprocess.run(
        [
            a.python,
            "-c",
            _GSP,
            str(a.model),
            str(p),
            str(t),
            str(s),
            str(q),
            str(o),
            # the measured rounds' seeds, then the warm-up rounds'
            *map(str, range(a.rounds + a.warm_rounds)),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **OFFLINE},
        timeout=600,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"deriving bench_serving's sessions failed: {proc.stderr.strip()[-1500:]}")
    a.session_tokens, a.session_texts = {}, {}
    folder = Path(tempfile.mkdtemp(prefix="workloads-sessions-"))
    for seed, got in json.loads(lines[-1]).items():
        convs = got["tokens"]
        # bench_serving's messages as they are: the first user turn holds the system text (no system message)
        texts = folder / f"seed{seed}.json"
        texts.write_text(json.dumps({"system": "", "sessions": got["texts"]}))
        a.session_texts[int(seed)] = texts
        questions = [n for conv in convs for n in conv[1:]]
        new = round(stats.median(questions)) if questions else q
        system = round(stats.median([conv[0] - new for conv in convs]))
        a.session_tokens[int(seed)] = {
            "system": max(system, 0),
            "new": max(new, 1),
            "bench_serving_new_tokens": sum(sum(conv) for conv in convs),
        }
    print(
        "sessions: bench_serving's prompts (new text per turn, tokens) -> sglops per round:"
        f" {a.session_tokens}",
        flush=True,
    )


def flush(port: int) -> None:
    """The server's prefix cache emptied, so each tool's run starts cold."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/flush_cache", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


def prefill_tokens(log: Path | None, offset: int) -> tuple[int | None, int | None]:
    """New and cached prompt tokens the server prefilled since `offset` of its log."""
    if not log:
        return None, None
    with open(log, "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode(errors="replace")
    found = PREFILL.findall(text)
    return sum(int(n) for n, _ in found), sum(int(c) for _, c in found)


def run_sglops(remote, port: int, workload: str, a: argparse.Namespace, seed: int) -> dict:
    if workload == "trace":
        res = bench.run_bench(
            remote,
            runs=1,
            dataset=f"trace:{a.derived},layout=timed_trace,unit=ms",
            trace_speed=1.0 / a.slowdown,
            api="sglang",
            port=port,
            warmup=1,
            input_len=64,
            output_len=16,
            with_facts=False,
            seed=seed,
            no_logprobs=a.no_logprobs,
            telemetry_interval=a.telemetry_interval,
        )
    else:
        p, t, _, _, o = a.session_shape
        s, q = a.session_tokens[seed]["system"], a.session_tokens[seed]["new"]
        res = bench.run_bench(
            remote,
            runs=1,
            dataset=(
                f"sessions:texts={a.session_texts[seed]},count={p},turns={t}"
                if a.session_api == "openai-chat"
                else f"sessions:count={p},turns={t},system={s},new={q}"
            ),
            output_len=o,
            input_len=q,
            concurrency=str(a.session_concurrency),
            api=a.session_api,
            port=port,
            warmup=1,
            with_facts=False,
            seed=seed,
            no_logprobs=a.no_logprobs,
            telemetry_interval=a.telemetry_interval,
        )
    lv = res.levels[0]
    if lv.status != "ok":
        raise SystemExit(f"sglops {workload} run not clean: {res.problems()}")
    return {
        "ttft_ms": lv.ttft_ms["median"],
        "tpot_ms": lv.tpot_ms["median"],
        "e2e_ms": lv.e2e_ms["median"],
        "requests": lv.requests_total,
        "prompt_tokens": (lv.prompt or {}).get("tokens"),
        "prompt_lens": sorted(rec["prompt_tokens"] or 0 for rep in res.raw for rec in rep["requests"]),
        "cached_tokens_per_turn": [t.get("cached_tokens") for t in lv.turns or []],
        "cache_hit": (lv.prompt or {}).get("cached_share"),
        "send_lag_ms_p99": (lv.send_lag_ms or {}).get("p99"),
        "suspect": lv.suspect,
    }


def run_bench_serving(port: int, workload: str, a: argparse.Namespace, seed: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench-serving-")) / "out.jsonl"
    model = str(a.model)
    common = [
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--model",
        model,
        "--tokenizer",
        model,
        "--warmup-requests",
        "1",
        "--flush-cache",
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--output-file",
        str(out),
    ]
    if workload == "trace":
        n = a.derived_stats["requests"]
        argv = [
            "--backend",
            "sglang",
            "--dataset-name",
            "mooncake",
            "--dataset-path",
            str(a.trace),
            "--num-prompts",
            str(n),
            "--mooncake-num-rounds",
            "1",
            "--mooncake-slowdown-factor",
            str(a.slowdown),
        ]
    else:
        p, t, s, q, o = a.session_shape
        n = p * t
        argv = [
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "generated-shared-prefix",
            "--gsp-num-groups",
            "1",
            "--gsp-prompts-per-group",
            str(p),
            "--gsp-num-turns",
            str(t),
            "--gsp-system-prompt-len",
            str(s),
            "--gsp-question-len",
            str(q),
            "--gsp-output-len",
            str(o),
            "--gsp-range-ratio",
            "1.0",
            "--num-prompts",
            str(p),
            "--max-concurrency",
            str(a.session_concurrency),
            "--request-rate",
            "inf",
            "--output-details",
        ]
    client = (
        ["-c", _OVERLAY, str(a.trace_client)]
        if workload == "trace" and a.trace_client
        else ["-m", a.serving_module]
    )
    proc = subprocess.run(
        [a.python, *client, *argv, *common],
        capture_output=True,
        text=True,
        env={**os.environ, **OFFLINE},
        timeout=1800,
    )
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(
            f"bench_serving {workload} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}"
        )
    doc = json.loads(out.read_text().strip().splitlines()[-1])
    if doc["completed"] != n:
        raise SystemExit(f"bench_serving {workload} completed {doc['completed']} of {n} requests")
    # --output-details: each request's prompt length; the server's count only where this bench_serving records
    # it (0.5.23's _record_server_prompt_len): 0.5.17's is each dataset row's length, the first turn's for
    # every turn of a session (serving.py:120), so it cannot say whether the conversations were the same
    lens = doc.get("input_lens") if counts_server_lens(a.python, client) else None
    return {
        "ttft_ms": doc["median_ttft_ms"],
        "tpot_ms": doc["median_tpot_ms"],
        "e2e_ms": doc["median_e2e_latency_ms"],
        "requests": doc["completed"],
        "prompt_tokens": doc.get("total_input_tokens") or None,
        "prompt_lens": sorted(lens) if isinstance(lens, list) else None,
        "cache_hit": None,
        "send_lag_ms_p99": None,
        "suspect": None,
    }


_SERVER_LENS = """
import importlib, sys
name = sys.argv[1]
print(hasattr(importlib.import_module(name), "_record_server_prompt_len"))
"""


@functools.cache
def _counts_server_lens(python: str, client: tuple[str, ...]) -> bool:
    if client[0] == "-c":
        # the overlay's serving module: read its source rather than run the overlay twice
        return "_record_server_prompt_len" in (Path(client[2]) / "sglang/benchmark/serving.py").read_text()
    proc = subprocess.run(
        [python, "-c", _SERVER_LENS, client[1]], capture_output=True, text=True, env={**os.environ, **OFFLINE}
    )
    return proc.stdout.strip() == "True"


def counts_server_lens(python: str, client: list[str]) -> bool:
    """Whether this bench_serving's --output-details input_lens are the server's prompt counts (probed in its
    own python, never assumed from a version)."""
    return _counts_server_lens(python, tuple(client))


def same_prompts(row: dict) -> bool | None:
    """Whether both tools' requests had the same prompt lengths (sorted; the server's counts): the same
    texts and the same answers carried. None where bench_serving gave none."""
    mine, theirs = row["sglops"].get("prompt_lens"), row["bench_serving"].get("prompt_lens")
    return None if not mine or not theirs else mine == theirs


def summarise(runs: list[dict]) -> list[dict]:
    rows = []
    for w in sorted({r["workload"] for r in runs}):
        mine = [r for r in runs if r["workload"] == w]
        for fig in FIGURES:
            pairs = [(r["sglops"].get(fig), r["bench_serving"].get(fig)) for r in mine]
            pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
            if not pairs:
                continue
            paired = [x / y for x, y in pairs if y]
            xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
            rows.append(
                {
                    "workload": w,
                    "figure": fig,
                    "sglops": stats.median(xs),
                    "bench_serving": stats.median(ys),
                    "ratio": stats.median(xs) / stats.median(ys) if stats.median(ys) else None,
                    "paired_ratios": paired,
                    "paired_median": stats.median(paired) if paired else None,
                    "sglops_spread": spread(xs),
                    "bench_serving_spread": spread(ys),
                }
            )
    return rows


def verdicts(rows: list[dict], within: float = 0.02) -> list[str]:
    out = []
    for r in rows:
        if r["figure"] in ("ttft_ms", "tpot_ms") and r["paired_ratios"]:
            lo, hi = min(r["paired_ratios"]), max(r["paired_ratios"])
            ok = abs(r["ratio"] - 1) <= within
            out.append(
                f"{r['workload']} {r['figure']}: sglops / bench_serving medians {r['ratio']:.4f}"
                f" ({'within' if ok else 'NOT within'} {within:.0%}); paired per round median"
                f" {r['paired_median']:.4f}, range {lo:.4f}-{hi:.4f} over {len(r['paired_ratios'])} round(s);"
                f" self-spread sglops {_pct(r['sglops_spread'])}, bench_serving"
                f" {_pct(r['bench_serving_spread'])}"
            )
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def print_table(rows: list[dict]) -> None:
    head = (
        f"{'workload':9} {'figure':22} {'sglops':>10} {'bench_serving':>13} {'ratio':>7}"
        f" {'paired ratios':>15}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        pr = f"{min(r['paired_ratios']):.3f}-{max(r['paired_ratios']):.3f}" if r["paired_ratios"] else "-"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        print(
            f"{r['workload']:9} {r['figure']:22} {r['sglops']:>10.2f} {r['bench_serving']:>13.2f} {ratio:>7} "
            f"{pr:>15}"
        )


def shape(text: str) -> tuple[int, ...]:
    parts = tuple(int(x) for x in text.split(","))
    if len(parts) != 5 or min(parts) < 1:
        raise argparse.ArgumentTypeError(
            "--sessions is sessions,turns,system,question,output (whole numbers >= 1)"
        )
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--warm-rounds",
        type=int,
        default=1,
        help="rounds of both tools run first and not kept (a fresh server's first shapes compile)",
    )
    ap.add_argument("--workloads", default="trace,sessions")
    ap.add_argument(
        "--trace", type=Path, default=DEFAULT_TRACE, help="a mooncake-layout trace (bench_serving's)"
    )
    ap.add_argument("--trace-requests", type=int, default=40, help="its first N records, on both sides")
    ap.add_argument(
        "--slowdown",
        type=float,
        default=1.0,
        help="bench_serving's --mooncake-slowdown-factor (sglops: --trace-speed 1/F)",
    )
    ap.add_argument(
        "--trace-client",
        type=Path,
        help=(
            "a folder holding another release's unmodified "
            "sglang/benchmark/, laid over the installed sglang for the trace's bench_serving (0.5.17's "
            "mooncake mode does not run: see _OVERLAY)"
        ),
    )
    ap.add_argument(
        "--trace-prompts",
        choices=("text", "ids"),
        default="text",
        help="sglops replays bench_serving's prompts as their text (default: the server tokenizes them, as "
        "for bench_serving) or as the ids the model's tokenizer gives them",
    )
    ap.add_argument("--make-trace", type=Path, help="write the synthetic mooncake trace here and exit")
    ap.add_argument("--trace-rate", type=float, default=5.0, help="with --make-trace: requests per second")
    ap.add_argument(
        "--sessions",
        type=shape,
        default=(8, 3, 256, 64, 32),
        dest="session_shape",
        help="sessions,turns,system,question,output (default 8,3,256,64,32)",
    )
    ap.add_argument("--session-concurrency", type=int, default=4)
    ap.add_argument(
        "--session-api",
        choices=("openai-chat", "openai", "sglang"),
        default="openai-chat",
        help=(
            "sglops' sessions on the chat endpoint with bench_serving's own texts (default: the same "
            "messages as bench_serving), or the ids paths shaped to its sizes: openai (/v1/completions), "
            "sglang (/generate)"
        ),
    )
    ap.add_argument(
        "--no-logprobs",
        action="store_true",
        help="sglops asks no logprobs (bench_serving asks none; sglops' default asks the chosen tokens')",
    )
    ap.add_argument(
        "--telemetry-interval",
        type=int,
        default=500,
        help=(
            "sglops' GPU telemetry sampler, ms between "
            "samples (0: none, as bench_serving; default 500, sglops' own)"
        ),
    )
    ap.add_argument(
        "--port",
        type=int,
        help=(
            "an SGLang server already running on 127.0.0.1, started with "
            "--chat-template CONCAT_TEMPLATE (default: start the CPU one)"
        ),
    )
    ap.add_argument("--server-log", type=Path, help="with --port: that server's log")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--python", help="the python that runs bench_serving (default: the CPU server's venv python)"
    )
    ap.add_argument(
        "--model", type=Path, help="the served model's folder (default: the CPU sandbox's tiny model)"
    )
    a = ap.parse_args()
    if a.make_trace:
        make_trace(a.make_trace, a.trace_requests, a.trace_rate, seed=0)
        print(a.make_trace)
        return
    if a.python is None:
        a.python = str(venv_python()) if venv_python().exists() else sys.executable
    a.model = a.model or model_dir()
    workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    if not workloads or set(workloads) - {"trace", "sessions"}:
        raise SystemExit(f"--workloads must name trace and/or sessions (got {a.workloads!r})")
    if not Path(a.model).is_dir():
        raise SystemExit(f"--model {a.model}: no such folder (bench_serving reads its tokenizer there)")
    if a.trace_client and not (a.trace_client / "sglang" / "benchmark" / "serving.py").is_file():
        raise SystemExit(f"--trace-client {a.trace_client}: no sglang/benchmark/serving.py there")
    if a.slowdown <= 0:
        raise SystemExit(f"--slowdown must be positive (got {a.slowdown})")
    a.serving_module = serving_module(a.python)
    print(f"bench_serving: {a.python} -m {a.serving_module}", flush=True)
    # two imports of sglang at once: each takes ~25 s on the GPU machine
    with ThreadPoolExecutor(2) as pool:
        trace = pool.submit(derive_trace, a) if "trace" in workloads else None
        sessions = pool.submit(derive_sessions, a) if "sessions" in workloads else None
        a.derived = trace.result() if trace else None
        if sessions:
            sessions.result()
    server, port, log = None, a.port, a.server_log
    if not port:
        port = free_port()
        log = Path(tempfile.mkdtemp(prefix="workloads-vs-serving-")) / "server.log"
        print(f"starting a real SGLang server on 127.0.0.1:{port} (log {log})", flush=True)
        server = start_server(port, log, extra=("--chat-template", str(CONCAT_TEMPLATE)), timeout=900)
    runs: list[dict] = []
    try:
        with connect(local_host(load_inventory(REPO / "no-inventory.yaml"))) as remote:
            # warm-up rounds first (negative numbers, not kept): a fresh server compiles kernels for the
            # shapes it meets first, and the tool that runs first would pay for it
            for rnd in range(-a.warm_rounds, a.rounds):
                for k, w in enumerate(workloads):
                    order = ("sglops", "bench_serving") if (rnd + k) % 2 == 0 else ("bench_serving", "sglops")
                    row: dict = {"round": rnd, "workload": w, "order": list(order)}
                    if rnd < 0:
                        for tool in order:
                            flush(port)
                            seed = a.rounds - 1 - rnd
                            _ = (
                                run_sglops(remote, port, w, a, seed=seed)
                                if tool == "sglops"
                                else run_bench_serving(port, w, a, seed=seed)
                            )
                        print(f"warm-up round {rnd} {w}: both tools ran, not kept", flush=True)
                        continue
                    for tool in order:
                        flush(port)
                        mark = log.stat().st_size if log else 0
                        t0 = time.monotonic()
                        row[tool] = (
                            run_sglops(remote, port, w, a, seed=rnd)
                            if tool == "sglops"
                            else run_bench_serving(port, w, a, seed=rnd)
                        )
                        row[tool]["wall_s"] = round(time.monotonic() - t0, 2)
                        row[tool]["server_gen_tok_s"] = server_rate(log, mark)
                        row[tool]["prefill_new_tokens"], row[tool]["prefill_cached_tokens"] = prefill_tokens(
                            log, mark
                        )
                    runs.append(row)
                    row["same_prompt_lens"] = same_prompts(row)
                    print(
                        f"round {rnd} {w}: TTFT sglops {row['sglops']['ttft_ms']:.2f} / bench_serving "
                        f"{row['bench_serving']['ttft_ms']:.2f} ms, TPOT {row['sglops']['tpot_ms']:.3f} / "
                        f"{row['bench_serving']['tpot_ms']:.3f} ms (order {' -> '.join(order)}); every "
                        f"request's prompt tokens the same on both sides: {row['same_prompt_lens']}",
                        flush=True,
                    )
                    save(a, runs)
    finally:
        if server:
            server.stop()
    rows = summarise(runs)
    print()
    print_table(rows)
    print()
    print("\n".join(verdicts(rows)))
    save(a, runs)


def save(a: argparse.Namespace, runs: list[dict]) -> None:
    """--json: every pair so far, the summary and the verdict lines (a run cut short keeps its rounds)."""
    if a.json:
        rows = summarise(runs)
        config = dict(vars(a))
        # paths (the trace, the sessions' text files) as text
        a.json.write_text(
            json.dumps(
                {"config": config, "runs": runs, "summary": rows, "verdicts": verdicts(rows)},
                indent=1,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
