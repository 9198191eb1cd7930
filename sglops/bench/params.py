"""The bench family's parameters: a bench's own (also ab's: each round is a bench) and what a comparison
requires (compare and ab). Kind, default and help of each are written here only; sglops.bench.run takes its
defaults from here."""

from __future__ import annotations

from sglops.core.op import Param
from sglops.core.values import MAX_TOKENS, Choice, Flag, Float, Int, IntList, Port, Str, StrList

RUNS = Param("runs", Int(1, 1000, 5), "repeats (median + bootstrap 95% CI over them; default {default})")
INPUT_LEN = Param(
    "input_len", Int(1, MAX_TOKENS, 128), "prompt tokens, sent as input_ids (exact length; default {default})"
)
OUTPUT_LEN = Param(
    "output_len", Int(2, MAX_TOKENS, 256), "tokens to generate (ignore_eos, temperature 0; default {default})"
)
CONCURRENCY = Param(
    "concurrency", IntList(1, 4096, [1]), "streams in flight, e.g. 1,4,16 (default 1: single-stream decode)"
)
API = Param(
    "api",
    Choice(("sglang", "openai", "openai-chat")),
    "sglang (native /generate), openai (/v1/completions) or openai-chat (/v1/chat/completions: text "
    "messages, with --dataset sessions or jsonl text prompts); default: the serving engine's own (SGLang: "
    "sglang, vLLM: openai, as the host finds its server)",
)
PORT = Param(
    "port", Port(), "the server's port on the host (default: the server sglops started there, else 30000)"
)
REQUESTS = Param("requests", Int(1, 1_000_000), "requests per repeat and level (default: one per stream)")
WARMUP = Param("warmup", Int(0, 1000, 1), "warm-up rounds per level, not counted (default {default})")
VOCAB_SIZE = Param(
    "vocab_size",
    Int(2, 1 << 24),
    "the model's vocabulary when the host cannot read its config.json (prompt ids are drawn below it)",
)
NO_LOGPROBS = Param(
    "no_logprobs", Flag(), "keep only the output token ids, not the chosen tokens' logprobs", flag=False
)
BENCH = (RUNS, INPUT_LEN, OUTPUT_LEN, CONCURRENCY, API, PORT, REQUESTS, WARMUP, VOCAB_SIZE, NO_LOGPROBS)
# run_bench's defaults
DEFAULTS = {p.name: p.kind.default for p in BENCH}

# what a comparison requires beyond speed (compare and ab)
REQUIRE_IDENTICAL = Param(
    "require_identical",
    Flag(),
    "exit 8 unless every run's outputs are identical to the "
    "baseline's (or within --tolerance-logprob / --min-identical-share)",
    flag=False,
)
REQUIRE_SAME_CONFIG = Param(
    "require_same_config",
    Flag(),
    "exit 8 on a server-config difference not named by --variable (patches aside)",
    flag=False,
)
TOLERANCE_LOGPROB = Param(
    "tolerance_logprob",
    Float(0, 1e6),
    "non-deterministic kernels: largest |logprob difference| still accepted",
)
MIN_IDENTICAL_SHARE = Param(
    "min_identical_share",
    Float(0, 1),
    "non-deterministic kernels: share of prompts (0-1) whose tokens must be identical",
)
VARIABLE = Param(
    "variable",
    StrList(),
    "config keys that are meant to differ, comma-separated (e.g. kv_cache_dtype,page_size)",
)
COMPARE = (REQUIRE_IDENTICAL, REQUIRE_SAME_CONFIG, TOLERANCE_LOGPROB, MIN_IDENTICAL_SHARE, VARIABLE)

# the loads a bench sends beyond closed-loop random ids (`inv bench` only; sglops.bench.loads parses them)
REQUEST_RATE = Param(
    "request_rate",
    Float(0.001, 1e6),
    "open loop: send requests at this rate per second whatever "
    "the server does (no cap on requests in flight)",
)
ARRIVAL = Param(
    "arrival",
    Choice(("poisson", "constant"), "poisson"),
    "open-loop arrivals: poisson (gamma with --burstiness) or constant (default {default})",
)
BURSTINESS = Param(
    "burstiness",
    Float(0.01, 100, 1.0),
    "gamma shape of Poisson arrivals: 1 = Poisson, < 1 burstier, > 1 smoother (default {default})",
)
DURATION = Param(
    "duration",
    Float(0.1, 86400),
    "seconds per level and repeat (instead of --requests): closed loop "
    "keeps its streams busy, open loop sends arrivals until then",
)
DATASET = Param(
    "dataset",
    Str(),
    "random (default), random:input=64-256,output=16-128, "
    "shared-prefix:groups=4,prefix=512, jsonl:PATH (prompts from a local file), or trace:PATH (a "
    "mooncake or timed_trace request trace, replayed at its timestamps)",
)
SLO = Param("slo", Str(), "goodput's SLOs in ms, e.g. ttft=500,tpot=50 (keys ttft, tpot, e2e, itl)")
SWEEP = Param(
    "sweep",
    Str(),
    "concurrency=1,2,4,8,16 or rate=1,2,4: one record, a throughput-vs-latency chart, the knee named",
)
METRICS_INTERVAL = Param(
    "metrics_interval",
    Float(0, 3600, 1.0),
    "scrape the server's /metrics every S seconds "
    "during each level where it serves them (0: never; default {default})",
)
REQUEST_DEADLINE = Param(
    "request_deadline",
    Float(1, 86400),
    "seconds one request may take in all (default: 120 s "
    "for its first data + output_len at 1 tok/s); a stream past it counts as timed out",
)
TRACE_SPEED = Param(
    "trace_speed",
    Float(0.001, 1000, 1.0),
    "--dataset trace: replay the trace this many times faster (2: twice the rate; default {default})",
)
MAX_RATE = Param(
    "max_rate",
    Flag(),
    "search the highest request rate meeting --slo at --goodput (bracket, then "
    "bisect: within 5% in at most 8 levels, each a run of its own)",
    flag=False,
)
GOODPUT = Param(
    "goodput",
    Float(0.01, 1, 0.9),
    "--max-rate: share of requests that must meet every SLO (default {default})",
)
TELEMETRY_INTERVAL = Param(
    "telemetry_interval",
    Int(0, 60_000, 500),
    "ms between GPU telemetry samples on the "
    "host while measuring (clocks, utilisation, power, memory; 0: none; default {default})",
)
LOADS = (
    REQUEST_RATE,
    ARRIVAL,
    BURSTINESS,
    DURATION,
    DATASET,
    SLO,
    SWEEP,
    METRICS_INTERVAL,
    REQUEST_DEADLINE,
    TRACE_SPEED,
    MAX_RATE,
    GOODPUT,
    TELEMETRY_INTERVAL,
)
