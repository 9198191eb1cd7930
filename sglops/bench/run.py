"""`inv bench`: single-stream (or concurrent) decode figures measured ON the host, repeated, and kept.

The client is a stdlib script (host/bench_client.py) that streams from the host's own
server on 127.0.0.1, so the figures carry no network jitter; it returns raw timings in one
round trip and this module turns them into figures (definitions in docs/bench.md):

- TTFT: request sent -> first chunk that raises the server's completion_tokens.
- ITL: each chunk gap spread over the tokens it carried (per token, as SGLang's native bench).
- TPOT: (e2e - TTFT) / (n - 1) per request, first token excluded (SGLang, vLLM).
- decode tok/s: tokens after the first chunk / (e2e - TTFT) per request; = 1 / TPOT when the first
  chunk carries one token (the usual case); a repeat's figure is the median over its requests.
- output tok/s: all tokens of a repeat / its wall time (bench_serving's output_throughput).
- e2e: request sent -> end of stream.

Besides timings, each measured request's outputs (token ids, chosen-token logprobs, text) go to the run's
outputs.json and one output hash per prompt to the manifest (sglops.bench.identity compares them), and the
server's effective configuration is recorded before measuring (sglops.bench.runconfig).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sglops.bench import identity, runconfig, stats, telemetry
from sglops.bench.plan import BenchPlan, plan_bench
from sglops.bench.record import standin
from sglops.core import artifacts, jsonsafe, redact
from sglops.core.errors import Failed
from sglops.core.op import Curves, RateSearch, Telemetry
from sglops.core.remote import Remote
from sglops.core.result import Observation
from sglops.engine import host_specs

# what a request answered: moved from the raw records to outputs.json (bench.json keeps timings and hashes)
OUTPUT_FIELDS = ("ids", "logprobs", "text", "tokens_text", "input_ids")


class BenchIncomplete(Failed):
    """Some requests failed: the run is recorded as partial/failed, never as a clean figure."""


# -- figures from raw timings ----------------------------------------------------------------------
def timeline(rec: dict) -> dict | None:
    """TTFT, per-token ITL and the first chunk's token count from a request's raw chunk timeline.

    Counted chunks (the server's cumulative completion_tokens per chunk): each gap is spread over the
    tokens its chunk carried (SGLang native bench_serving's ITL). Uncounted chunks (an OpenAI server without
    per-chunk usage): the gaps are spread evenly over the final usage count ("chunks_spread").
    """
    times, counts, n = rec.get("chunk_t") or [], rec.get("chunk_n") or [], rec.get("tokens") or 0
    if not times or not n:
        return None
    if None not in counts:
        itl, chunk_tokens = [], [counts[0]]
        for i in range(1, len(times)):
            carried = counts[i] - counts[i - 1]
            itl.extend([(times[i] - times[i - 1]) / carried] * carried)
            chunk_tokens.append(carried)
        return {
            "ttft": times[0],
            "first": counts[0],
            "itl": itl,
            "chunk_tokens": chunk_tokens,
            "basis": "per_token",
        }
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    itl, done = [], 0
    per_gap = (n - 1) / len(gaps) if gaps else 0
    for i, gap in enumerate(gaps):
        upto = round((i + 1) * per_gap)
        if upto > done:
            itl.extend([gap / (upto - done)] * (upto - done))
            done = upto
    return {
        "ttft": times[0],
        "first": n - len(itl),
        "itl": itl,
        "chunk_tokens": None,
        "basis": "per_token" if len(times) == n else "chunks_spread",
    }


# one chunk carrying over half the decode tokens: the decode window was not measured
SUSPECT_BURST_SHARE = 0.5
# fewer decode tokens than this: a burst rule would flag ordinary merged chunks
SUSPECT_MIN_DECODE = 4
SUSPECT_CLOCK_SLACK_S = 0.002


def suspect_reason(rec: dict, tl: dict | None = None) -> str | None:
    """Why a request's figures cannot be what the server did, or None.

    - burst: most decode tokens arrived in one chunk (a stalled stream delivered at once), so e2e - TTFT
      measures delivery, not decoding (the 148,433 tok/s "measurement" of one such request);
    - the client saw the stream end before the server says it finished (meta_info.e2e_latency, where the
      server reports it): the client's clock or timeline is wrong.
    """
    tl = tl or timeline(rec)
    if tl is None:
        return None
    n, first = rec["tokens"], tl["first"]
    decode = n - first
    if tl["chunk_tokens"] is not None and decode >= SUSPECT_MIN_DECODE:
        biggest = max(tl["chunk_tokens"][1:], default=0)
        if biggest > SUSPECT_BURST_SHARE * decode:
            return f"burst: {biggest} of {decode} decode tokens in one chunk"
    if tl["chunk_tokens"] is not None and n >= SUSPECT_MIN_DECODE and first > SUSPECT_BURST_SHARE * n:
        return f"burst: the first chunk carried {first} of {n} tokens"
    if (
        tl["chunk_tokens"] is None
        and decode >= SUSPECT_MIN_DECODE
        and len(tl["itl"])
        and len(rec["chunk_t"]) < 3
    ):
        return f"burst: {n} tokens in {len(rec['chunk_t'])} chunks"
    server = rec.get("server_e2e_s")
    if server is not None and rec.get("e2e_s") is not None and rec["e2e_s"] < server - SUSPECT_CLOCK_SLACK_S:
        return (
            f"stream ended {1e3 * (server - rec['e2e_s']):.1f} ms before the server's own e2e_latency "
            f"({1e3 * server:.1f} ms)"
        )
    return None


def request_metrics(rec: dict) -> dict | None:
    """Derived figures of one successful request (None when it cannot give a decode rate).

    Adds `suspect` (a reason) when the figures cannot be what the server did; callers keep those out.
    """
    if rec["outcome"] != "ok":
        return None
    tl = timeline(rec)
    e2e = rec.get("e2e_s")
    if tl is None or e2e is None:
        return None
    n, ttft, first = rec["tokens"], tl["ttft"], tl["first"]
    if n - first < 1 or e2e <= ttft:
        return {"suspect": suspect_reason(rec, tl) or "no decode window (every token in the first chunk)"}
    return {
        "tokens": n,
        "ttft_ms": ttft * 1e3,
        "e2e_ms": e2e * 1e3,
        "tpot_ms": (e2e - ttft) / (n - 1) * 1e3,
        "decode_tok_s": (n - first) / (e2e - ttft),
        "itl_ms": [x * 1e3 for x in tl["itl"]],
        "itl_basis": tl["basis"],
        "suspect": suspect_reason(rec, tl),
    }


def meets(m: dict, slo: dict[str, float]) -> bool:
    """A request's figures within every SLO (ms): TTFT, TPOT, e2e as they are; ITL: its worst gap."""
    for key, limit in slo.items():
        value = max(m["itl_ms"], default=0.0) if key == "itl_ms" else m[key]
        if value > limit:
            return False
    return True


@dataclass
class Level:
    """Everything measured at one concurrency, pooled over the repeats."""

    concurrency: int
    requests_total: int
    outcomes: dict[str, int]
    errors: list[str]
    # over repeats: median, ci95, cv, noisy, values
    decode_tok_s: dict | None
    output_tok_s: dict | None
    # pooled over requests: median, p90, p99, ...
    ttft_ms: dict | None
    itl_ms: dict | None
    tpot_ms: dict | None
    e2e_ms: dict | None
    per_request: dict[str, list]
    client_cpu_us_per_token: float | None
    itl_basis: list[str]
    # reason kind -> requests kept out of the figures
    suspect: dict[str, int] = field(default_factory=dict)
    suspect_examples: list[str] = field(default_factory=list)
    # an open-loop level: requests sent at this rate (concurrency 0: no cap)
    request_rate: float | None = None
    # completed requests per second, over repeats
    request_throughput: dict | None = None
    # requests within every SLO: {"slo", "req_s" (figure), "share"}
    goodput: dict | None = None
    # prompt tokens sent and served from the server's prefix cache
    prompt: dict | None = None
    # the server's own figures: /metrics over the level, per-request decode rate
    server: dict | None = None
    # open loop: how late the client sent requests (a client bottleneck shows)
    send_lag_ms: dict | None = None
    # a trace replayed at its timestamps, this many times faster
    trace_speed: float | None = None
    # multi-turn sessions: per turn, TTFT and the server's prefix-cache hits
    turns: list[dict] | None = None
    # GPU telemetry over the level (sglops.bench.telemetry), or why there is none
    gpu: dict | None = None

    @property
    def load(self) -> str:
        """The level's name: `C=4`, `4 req/s` for an open loop, `trace x1` for a replayed trace."""
        if self.trace_speed:
            return f"trace x{self.trace_speed:g}"
        return f"{self.request_rate:g} req/s" if self.request_rate else f"C={self.concurrency}"

    @property
    def ok(self) -> int:
        return self.outcomes.get("ok", 0)

    @property
    def suspects(self) -> int:
        return sum(self.suspect.values())

    @property
    def status(self) -> str:
        if self.ok == self.requests_total and self.decode_tok_s:
            return "ok"
        return "failed" if not self.ok or not self.per_request.get("tpot_ms") else "partial"

    def to_json(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "status": self.status,
            "requests": self.requests_total,
            "outcomes": self.outcomes,
            "errors": self.errors,
            "suspect": self.suspect,
            "suspect_examples": self.suspect_examples,
            "decode_tok_s": self.decode_tok_s,
            "output_tok_s": self.output_tok_s,
            "ttft_ms": self.ttft_ms,
            "itl_ms": self.itl_ms,
            "tpot_ms": self.tpot_ms,
            "e2e_ms": self.e2e_ms,
            "per_request": self.per_request,
            "client_cpu_us_per_token": self.client_cpu_us_per_token,
            "itl_basis": self.itl_basis,
            "request_rate": self.request_rate,
            "request_throughput": self.request_throughput,
            "goodput": self.goodput,
            "prompt": self.prompt,
            "server": self.server,
            "send_lag_ms": self.send_lag_ms,
            "trace_speed": self.trace_speed,
            "turns": self.turns,
            "gpu": self.gpu,
        }


def analyze(
    repeats: Sequence[dict], concurrency: int, rate: float | None = None, slo: dict[str, float] | None = None
) -> Level:
    """One level's figures from the raw repeats the host script returned (a level: a concurrency, or an
    open-loop request rate).

    Failed requests (any outcome but ok, including wrong_length) make the level partial; suspect requests
    (see suspect_reason) are counted and kept out of every figure, the repeat's too. Goodput counts the
    requests within every SLO per second of the repeat's wall time (SGLang bench_serving's definition).
    """
    mine = [r for r in repeats if r["concurrency"] == concurrency and r.get("request_rate") == rate]
    recs = [rec for r in mine for rec in r["requests"]]
    outcomes = Counter(rec["outcome"] for rec in recs)
    errors = sorted({f"{rec['outcome']}: {rec['error']}" for rec in recs if rec.get("error")})[:5]
    suspect: Counter = Counter()
    examples: list[str] = []
    good: list[dict] = []
    # one figure per repeat
    per = {"decode": [], "output": [], "req": [], "good": []}
    for r in mine:
        ms = _sound_metrics(r["requests"], suspect, examples)
        good += ms
        _repeat_figures(r, ms, slo, per)
    tokens = sum(rec["tokens"] for rec in recs)
    cpu = sum(rec.get("cpu_s") or 0.0 for rec in recs)
    return Level(
        concurrency=concurrency,
        requests_total=len(recs),
        outcomes=dict(outcomes),
        errors=errors,
        decode_tok_s=stats.figure(per["decode"]),
        output_tok_s=stats.figure(per["output"]),
        ttft_ms=stats.summary([m["ttft_ms"] for m in good]),
        itl_ms=stats.summary([x for m in good for x in m["itl_ms"]]),
        tpot_ms=stats.summary([m["tpot_ms"] for m in good]),
        e2e_ms=stats.summary([m["e2e_ms"] for m in good]),
        per_request={key: [m[key] for m in good] for key in ("decode_tok_s", "tpot_ms", "ttft_ms", "e2e_ms")},
        client_cpu_us_per_token=cpu / tokens * 1e6 if tokens else None,
        itl_basis=sorted({m["itl_basis"] for m in good}),
        suspect=dict(suspect),
        suspect_examples=examples,
        request_rate=rate,
        request_throughput=stats.figure(per["req"]),
        goodput=(
            {
                "slo": slo,
                "req_s": stats.figure(per["good"]),
                "share": sum(meets(m, slo) for m in good) / len(recs) if recs else None,
            }
            if slo
            else None
        ),
        prompt=_prompt_tokens(recs),
        server=_server(mine, recs),
        send_lag_ms=stats.summary([rec["lag_s"] * 1e3 for rec in recs if rec.get("lag_s") is not None]),
        trace_speed=next((r["trace_speed"] for r in mine if r.get("trace_speed")), None),
        turns=_turns(recs),
    )


def _sound_metrics(recs: Sequence[dict], suspect: Counter, examples: list[str]) -> list[dict]:
    """The figures of a repeat's requests that can be what the server did; suspect ones are counted by their
    reason's kind (and the first three reasons kept) instead."""
    out = []
    for rec in recs:
        m = request_metrics(rec)
        if m and m["suspect"]:
            suspect[m["suspect"].split(":")[0]] += 1
            if len(examples) < 3:
                examples.append(m["suspect"])
        elif m:
            out.append(m)
    return out


def _repeat_figures(r: dict, ms: Sequence[dict], slo: dict[str, float] | None, per: dict[str, list]) -> None:
    """A repeat's own figures: completed requests/s and goodput over its wall time; its median decode rate and
    output tok/s only when every request of it succeeded."""
    if r["wall_s"] > 0:
        per["req"].append(sum(rec["outcome"] == "ok" for rec in r["requests"]) / r["wall_s"])
        if slo:
            per["good"].append(sum(meets(m, slo) for m in ms) / r["wall_s"])
    if ms and all(rec["outcome"] == "ok" for rec in r["requests"]):
        per["decode"].append(stats.median([m["decode_tok_s"] for m in ms]))
        per["output"].append(sum(rec["tokens"] for rec in r["requests"]) / r["wall_s"])


def _turns(recs: Sequence[dict]) -> list[dict] | None:
    """Multi-turn sessions, per turn (1-based): requests, TTFT and TPOT over its sound requests, the prompt it
    sent and the share the server says its prefix cache served (`cached_tokens`; None where the server reports
    none)."""
    if not any("turn" in rec for rec in recs):
        return None
    out = []
    for t in sorted({rec["turn"] for rec in recs}):
        mine = [rec for rec in recs if rec["turn"] == t]
        ms = [m for m in (request_metrics(rec) for rec in mine) if m and not m["suspect"]]
        p = _prompt_tokens(mine) or {}
        out.append(
            {
                "turn": t + 1,
                "requests": len(mine),
                "ok": sum(rec["outcome"] == "ok" for rec in mine),
                "ttft_ms": stats.summary([m["ttft_ms"] for m in ms]),
                "tpot_ms": stats.summary([m["tpot_ms"] for m in ms if m.get("tpot_ms") is not None]),
                "prompt_tokens": p.get("tokens"),
                "cached_tokens": p.get("cached_tokens"),
                "cache_hit": p.get("cached_share"),
            }
        )
    return out


def _prompt_tokens(recs: Sequence[dict]) -> dict | None:
    """Prompt tokens the server counted and those it served from its prefix cache (its own usage fields)."""
    counted = [rec for rec in recs if rec.get("prompt_tokens") is not None]
    if not counted:
        return None
    total = sum(rec["prompt_tokens"] for rec in counted)
    reported = [rec for rec in counted if rec.get("cached_tokens") is not None]
    cached = sum(rec["cached_tokens"] for rec in reported)
    return {
        "tokens": total,
        "cached_tokens": cached if reported else None,
        "cached_share": cached / total if reported and total else None,
        "requests_reporting_cache": len(reported),
        "requests": len(counted),
    }


def _server(mine: Sequence[dict], recs: Sequence[dict]) -> dict | None:
    """The server's own figures: /metrics over the level, and its per-request decode rate (meta_info
    decode_throughput, SGLang with --enable-metrics) beside the client's."""
    from sglops.bench import servermetrics

    out = servermetrics.summarise([r.get("metrics") or [] for r in mine]) or {}
    rates = [
        rec["server_decode_tok_s"]
        for rec in recs
        if rec["outcome"] == "ok" and isinstance(rec.get("server_decode_tok_s"), int | float)
    ]
    if rates:
        out["request_decode_tok_s"] = stats.median(rates)
    return out or None


# -- the result -------------------------------------------------------------------------------------------
@dataclass
class BenchResult(Observation):
    """One bench run on one host: config, figures per concurrency, and what was running."""

    host: str
    config: dict[str, Any]
    levels: list[Level]
    server_info: dict | None
    sglang: dict | None
    patches: list[dict]
    warmup: list[dict]
    client: dict[str, Any]
    facts: dict | None = None
    raw: list[dict] = field(default_factory=list, repr=False)
    run_id: str | None = None
    artifact: str | None = None
    # what served: version, process, its python, log, token space
    server: dict | None = None
    # the server died or stopped answering mid-run: how, and the cause
    server_down: dict | None = None
    # another server or configuration answered after measuring
    server_changed: list[str] | None = None
    # per measured request (outputs.json)
    outputs: list[dict] = field(default_factory=list, repr=False)
    # --sweep: the curve's points, its knee and the chart (sglops.bench.load_curve)
    sweep: dict | None = None
    # --max-rate: the search's probes and answer (sglops.bench.max_rate)
    max_rate: dict | None = None
    # the host's GPU sampler while measuring: its rows, source, cost (host/telemetry.py)
    telemetry: dict | None = None

    @property
    def status(self) -> str:
        states = {lv.status for lv in self.levels}
        if states == {"ok"}:
            return "partial" if self.server_changed else "ok"
        return "failed" if states == {"failed"} else "partial"

    @property
    def standin(self) -> bool:
        """The server said it is sglops' stand-in (its
        /server_info): every figure of this run is set by it."""
        return standin({"launch_args": self.server_info})

    @property
    def outputs_whole(self) -> bool:
        """Every request answered, by one server that stayed the same: the outputs compare in full even where
        the timings are not a clean figure (suspect requests kept out of the figures, e.g. a starved host's
        bursts)."""
        return (
            bool(self.levels)
            and not self.server_down
            and not self.server_changed
            and all(lv.ok == lv.requests_total for lv in self.levels)
        )

    def headline(self) -> dict | None:
        """The figure `inv runs` lists: decode tok/s at the lowest concurrency."""
        lv = min(self.levels, key=lambda x: x.concurrency) if self.levels else None
        if not lv or not lv.decode_tok_s:
            return None
        return {
            "concurrency": lv.concurrency,
            "median": lv.decode_tok_s["median"],
            "ci95": lv.decode_tok_s["ci95"],
            "cv": lv.decode_tok_s["cv"],
        }

    def problems(self) -> list[str]:
        """Why the run is not a clean figure (or what was kept out of it), one line each."""
        out = []
        if self.server_down:
            out.append(self.server_down.get("line") or f"server {self.server_down.get('state')}")
        if self.server_changed:
            out.append(
                "the server changed during the run (its figures mix two servers): "
                + "; ".join(self.server_changed[:5])
            )
        for lv in self.levels:
            bad = {k: v for k, v in sorted(lv.outcomes.items()) if k != "ok"}
            if bad:
                out.append(
                    f"{lv.load}: {lv.requests_total - lv.ok} of {lv.requests_total} requests failed ("
                    + ", ".join(f"{k} {v}" for k, v in bad.items())
                    + ")"
                )
            if lv.suspects:
                out.append(
                    f"{lv.load}: {lv.suspects} suspect request(s) kept out of the figures ("
                    + "; ".join(lv.suspect_examples)
                    + ")"
                )
        srv = (self.server or {}).get("version")
        tree = (self.sglang or {}).get("tree_version")
        missing = sum(1 for e in self.outputs if e.get("outcome") == "ok" and e.get("ids") is None)
        if missing:
            out.append(
                f"the server returned no output token ids for {missing} request(s): their outputs cannot "
                "be checked for identity"
            )
        if srv and tree and srv != tree:
            out.append(
                f"the server runs sglang {srv} but the tree at {(self.sglang or {}).get('root')} is {tree}: "
                "the commit and patches recorded may not be what served"
            )
        return out

    @property
    def logprobs_kept(self) -> bool:
        """Every ok request came back with logprobs (asked for, and the server gave them)."""
        ok = [e for e in self.outputs if e.get("outcome") == "ok"]
        return bool(ok) and all(e.get("logprobs") is not None for e in ok)

    def notes(self) -> list[str]:
        """What a reader of the figures should know that does not make the run unclean."""
        out = []
        ok = [e for e in self.outputs if e.get("outcome") == "ok"]
        cached = [e for e in ok if (e.get("cached_tokens") or 0) > 0]
        if cached and (self.config.get("dataset") or {}).get("kind") in ("shared_prefix", "prompts"):
            out.append(
                f"{len(cached)} of {len(ok)} measured prompts were served partly from the server's prefix "
                "cache (cached tokens per level in the table)"
            )
        elif cached:
            out.append(
                f"{len(cached)} of {len(ok)} measured prompts were served partly from the server's prefix "
                "cache (the same prompts were sent before: same seed, server not restarted): TTFT is not a "
                "cold prefill"
            )
        if not self.config.get("warmup"):
            out.append("no warm-up (--warmup 0): the first repeat includes cold-start effects")
        return out

    def run_manifest(self) -> dict:
        """What the run's manifest.json records beside bench.json: what was running."""
        sgl = self.sglang or {}
        return {
            "standin": self.standin,
            "bench": {
                "status": self.status,
                "api": self.config["api"],
                "decode_tok_s": self.headline(),
                "input_len": self.config["input_len"],
                "output_len": self.config["output_len"],
                "concurrency": self.config["concurrency"],
                "runs": self.config["runs"],
                "suspect_requests": sum(lv.suspects for lv in self.levels),
                "problems": self.problems(),
                "notes": self.notes(),
            },
            "sglang": {
                k: sgl.get(k)
                for k in (
                    "version",
                    "version_from",
                    "tree_version",
                    "commit",
                    "branch",
                    "dirty",
                    "dirty_files",
                    "root",
                )
            },
            "server": self.server,
            "server_down": self.server_down,
            "server_changed": self.server_changed,
            "patches": self.patches,
            "launch_args": self.server_info,
            "run_config": runconfig.summary(self.server_info, self.sglang, self.patches),
            "outputs": identity.summary(self.outputs, self.logprobs_kept, self.config["api"]),
            "facts": self.facts,
            "gpu_telemetry": (
                {
                    k: (self.telemetry or {}).get(k)
                    for k in ("source", "standin", "absent", "interval_ms", "sampler", "errors", "chart")
                }
                if self.telemetry
                else None
            ),
        }

    def run_files(self) -> dict[str, bytes]:
        return {identity.OUTPUTS_FILE: outputs_json(self)}

    def payload(self) -> dict:
        return {
            "kind": "sglops-bench",
            "version": 1,
            "host": self.host,
            "status": self.status,
            "run_id": self.run_id,
            "config": self.config,
            "levels": [lv.to_json() for lv in self.levels],
            "warmup": self.warmup,
            "client": self.client,
            **self.run_manifest(),
            "sweep": self.sweep,
            "max_rate": self.max_rate,
            "telemetry": self.telemetry,
            "raw": self.raw,
        }


# -- running it ---------------------------------------------------------------------------------------------
def split_outputs(repeats: list[dict]) -> list[dict]:
    """Move what each measured request answered out of the raw records into one entry per request, in the
    order they were planned (`n`), leaving each raw record its prompt and output hashes."""
    out = []
    for rep in repeats:
        for rec in rep["requests"]:
            got = {k: rec.pop(k, None) for k in OUTPUT_FIELDS}
            ids = got["ids"]
            rec["output"] = identity.ids_hash(ids) if ids is not None else None
            out.append(
                {
                    "n": len(out),
                    "repeat": rep["repeat"],
                    "concurrency": rep["concurrency"],
                    "prompt": rec.get("prompt"),
                    "output": rec["output"],
                    "outcome": rec["outcome"],
                    "ids": ids,
                    "logprobs": got["logprobs"],
                    "text": got["text"],
                    "tokens": got["tokens_text"],
                    "input_ids": got["input_ids"],
                    "cached_tokens": rec.get("cached_tokens"),
                }
            )
    return out


def run_bench(
    remote: Remote,
    plan: BenchPlan | None = None,
    *,
    request_timeout: float = 120,
    timeout: float = 3600,
    with_facts: bool = True,
    on_progress: Callable[[dict], None] | None = None,
    test_options: dict | None = None,
    seed: int = 0,
    **flags: Any,
) -> BenchResult:
    """Bench the server on remote's 127.0.0.1:port in one round trip (plus one for host facts).

    `plan` is the operation's (sglops.bench.plan, made by its prepare); library callers give the bench flags
    as keywords instead (`runs=2, concurrency="1,4"`) and the plan is made from them the same way.
    A server that is down or unhealthy raises (nothing is measured); failed requests are counted
    per request and make the result partial or failed; a server that dies mid-run ends the run, and
    the result says so with the cause from the server's log. `test_options` (tests only) reach the
    host script as is: `test_token_range` [low, high), `test_sampling_override` {"max_new_tokens": N}, `seed`.
    `seed` picks the prompts (the same seed: the same prompts; runs meant to be compared share one).
    Every measured request's output ids (and, unless `no_logprobs`, its chosen tokens' logprobs) are kept.
    """
    if plan is None:
        plan = plan_bench(flags)
    elif flags:
        raise TypeError(f"run_bench: a plan and flags ({', '.join(flags)}) at once")
    seed = int((test_options or {}).get("seed", seed))
    args = {
        **plan.host_args(),
        "sglang_root": remote.host.sglang_root,
        # the host finds its server's engine (its bench API, where it says its configuration)
        "engines": host_specs(),
        "request_timeout": float(request_timeout),
        "seed": seed,
        **(test_options or {}),
    }
    raw = remote.run_py("bench_client", args, timeout=timeout, on_progress=on_progress)
    facts = _facts(remote, raw["port"]) if with_facts else None
    return _result(remote.name, raw, plan, seed, facts)


def _facts(remote: Remote, port: int) -> dict:
    """The host's facts (GPUs, driver, torch, ...) beside the run: one more round trip."""
    from sglops.probe.facts import gather

    return gather(remote, port=port).to_json()


def _result(host: str, raw: dict, plan: BenchPlan, seed: int, facts: dict | None) -> BenchResult:
    """The run from the host script's raw answer: figures per level, what served, outputs apart, the sweep."""
    outputs = split_outputs(raw["repeats"])
    tokens = raw["client_tokens"]
    result = BenchResult(
        host=host,
        config=_config(raw, plan, seed),
        levels=[analyze(raw["repeats"], lv["concurrency"], lv["rate"], plan.slo) for lv in plan.levels],
        server_info=raw["server_info"],
        sglang=sglang_record(raw.get("sglang"), raw.get("server_version")),
        patches=raw["patches"],
        warmup=raw["warmup"],
        client={
            "cpu_s": raw["client_cpu_s"],
            "tokens": tokens,
            "cpu_us_per_token": raw["client_cpu_s"] / tokens * 1e6 if tokens else None,
        },
        facts=facts,
        raw=raw["repeats"],
        server=_served(raw),
        server_down=raw.get("server_down"),
        server_changed=raw.get("server_changed"),
        outputs=outputs,
        sweep=None,
    )
    result.telemetry = raw.get("telemetry")
    for lv, spec in zip(result.levels, plan.levels, strict=True):
        lv.gpu = telemetry.level(
            result.telemetry,
            [
                r
                for r in raw["repeats"]
                if r["concurrency"] == spec["concurrency"] and r.get("request_rate") == spec["rate"]
            ],
        )
    if plan.sweep:
        from sglops.bench import load_curve as sweep_mod

        result.sweep = sweep_mod.summary([lv.to_json() for lv in result.levels])
    return result


def _config(raw: dict, plan: BenchPlan, seed: int) -> dict:
    """bench.json's `config`: what was asked and how the host script read it (port, model, levels)."""
    open_loop = plan.open_loop
    return {
        # the one the host used: --api, else the serving engine's
        "api": raw["api"],
        "port": raw["port"],
        "port_from": raw.get("port_from"),
        "model": raw["model"],
        "runs": plan.runs,
        "input_len": plan.input_len,
        "output_len": plan.output_len,
        "concurrency": [lv["concurrency"] for lv in plan.levels],
        "requests_per_run": raw["requests_per_run"],
        "levels": raw.get("levels"),
        "warmup": plan.warmup,
        "ignore_eos": True,
        "temperature": 0,
        "input": plan.describe(),
        "dataset": {k: v for k, v in plan.dataset.items() if k != "items"},
        "loop": "open" if open_loop else "closed",
        "request_rates": [lv["rate"] for lv in plan.levels if lv["rate"]] or None,
        "arrival": plan.arrival if open_loop else None,
        "burstiness": plan.burstiness if open_loop else None,
        "duration_s": plan.duration,
        "slo_ms": plan.slo,
        "sweep": plan.sweep,
        "flags": dict(plan.flags),
        "server_metrics": raw.get("server_metrics"),
        "token_space": raw.get("token_space"),
        "order": "repeats interleaved across concurrency levels",
        "logprobs": bool(raw.get("logprobs")),
        "seed": seed,
        "warmup_wave": (
            "each warm-up round sends C requests at once per level (a full wave of C streams), "
            "up to 32 tokens each; not counted"
        ),
    }


def _served(raw: dict) -> dict | None:
    """What served, as the host script found it: version, process, its python, log, token space."""
    proc = raw.get("server_process") or {}
    if not raw.get("server_version") and not proc:
        return None
    return {
        "version": raw.get("server_version"),
        "pid": proc.get("pid"),
        "argv": proc.get("argv"),
        "log": proc.get("log"),
        "started_by_sglops": proc.get("started_by_sglops"),
        "python": proc.get("env"),
        "token_space": raw.get("token_space"),
    }


def merged(results: Sequence[BenchResult]) -> BenchResult:
    """Several runs of one plan at different levels (a max-rate search's probes) as one result: levels by
    rate, raw records and outputs one after the other, the first run's server, facts and config (with every
    rate)."""
    first = results[0]
    levels = sorted((lv for r in results for lv in r.levels), key=lambda lv: lv.request_rate or 0)
    outputs = [{**o, "n": n} for n, o in enumerate(o for r in results for o in r.outputs)]
    config = {
        **first.config,
        "request_rates": [lv.request_rate for lv in levels],
        "concurrency": [lv.concurrency for lv in levels],
        "runs_merged": [r.run_id for r in results],
    }
    return BenchResult(
        host=first.host,
        config=config,
        levels=levels,
        server_info=first.server_info,
        sglang=first.sglang,
        patches=first.patches,
        warmup=[w for r in results for w in r.warmup],
        client={
            "cpu_s": sum(r.client["cpu_s"] for r in results),
            "tokens": sum(r.client["tokens"] for r in results),
            "cpu_us_per_token": None,
        },
        facts=first.facts,
        raw=[rep for r in results for rep in r.raw],
        server=first.server,
        server_down=next((r.server_down for r in results if r.server_down), None),
        server_changed=next((r.server_changed for r in results if r.server_changed), None),
        outputs=outputs,
        telemetry=_merged_telemetry([r.telemetry for r in results]),
    )


def _merged_telemetry(parts: Sequence[dict | None]) -> dict | None:
    """The runs' samplers as one: the first's source and labels, every run's rows, their costs added."""
    have = [p for p in parts if p]
    if not have:
        return None
    cost = [p.get("sampler") or {} for p in have]
    wall, cpu = sum(c.get("wall_s") or 0 for c in cost), sum(c.get("cpu_s") or 0 for c in cost)
    return {
        **have[0],
        "samples": [row for p in have for row in p.get("samples") or []],
        "sampler": {"wall_s": wall, "cpu_s": cpu, "cpu_s_per_s": cpu / wall if wall else None},
    }


def sglang_record(tree: dict | None, server_version: str | None) -> dict | None:
    """The tree on the host (commit, dirty files) with the version the SERVER reported: that is what ran."""
    if not tree and not server_version:
        return None
    out = dict(tree or {})
    out["tree_version"] = (tree or {}).get("version")
    out["version"] = server_version or out["tree_version"]
    out["version_from"] = "server /server_info" if server_version else "tree"
    return out


def record(result: BenchResult, run_id: str) -> BenchResult:
    """Keep the run as `run_id` (minted by the caller's runner, sglops.core.op.new_run_id): bench.json,
    outputs.json and a manifest of what was running, through sglops.core.artifacts.keep like every run."""
    result.run_id = run_id
    artifacts.keep(result.host, run_id, "bench.json", result, task="bench")
    return result


def draw_sweep(result: BenchResult, draw: Callable | None) -> None:
    """A sweep's chart (sweep.png in the run's folder),
    drawn by the runner's views; nothing for other runs."""
    if result.sweep and draw is not None and result.run_id:
        chart = artifacts.run_dir(result.host, result.run_id) / "sweep.png"
        result.sweep["chart"] = str(
            draw(
                Curves(
                    [{"label": result.run_id, **result.sweep}],
                    f"sweep on {result.host}: {result.config['input']}",
                    sweep=True,
                ),
                chart,
            )
        )


def draw_max_rate(result: BenchResult, draw: Callable | None) -> None:
    """A max-rate search's chart (max_rate.png): goodput
    share per probed rate and latency against the SLOs."""
    if result.max_rate and draw is not None and result.run_id:
        chart = artifacts.run_dir(result.host, result.run_id) / "max_rate.png"
        result.max_rate["chart"] = str(
            draw(
                RateSearch(
                    {
                        "search": result.max_rate,
                        "levels": [lv.to_json() for lv in result.levels],
                        "title": f"max rate on {result.host}: {result.config['input']}",
                    }
                ),
                chart,
            )
        )


def draw_telemetry(result: BenchResult, draw: Callable | None) -> None:
    """The GPU telemetry chart (gpu.png): SM clock, utilisation and power over the run, levels shaded."""
    tel = result.telemetry or {}
    if not tel.get("samples") or draw is None or not result.run_id:
        return
    windows = [
        (lv.load, r["started"], r["started"] + r["wall_s"])
        for lv in result.levels
        for r in result.raw
        if r["concurrency"] == lv.concurrency
        and r.get("request_rate") == lv.request_rate
        and r.get("started")
    ]
    chart = artifacts.run_dir(result.host, result.run_id) / "gpu.png"
    tel["chart"] = str(
        draw(
            Telemetry(
                {
                    "series": telemetry.series(tel),
                    "windows": windows,
                    "standin": tel.get("standin"),
                    "title": (
                        f"GPU telemetry on {result.host} ({tel.get('source')}, every"
                        f" {tel.get('interval_ms')} ms)"
                    ),
                }
            ),
            chart,
        )
    )


def outputs_json(result: BenchResult) -> bytes:
    """outputs.json: one compact line of JSON (ids, logprobs, text per request)."""
    doc = {
        "kind": "sglops-outputs",
        "version": 1,
        "api": result.config["api"],
        "logprobs": result.logprobs_kept,
        "hash": "sha256 over the comma-joined ids, 16 hex",
        "requests": result.outputs,
    }
    return jsonsafe.dumps(redact.obj(doc))


def check(results: Sequence[BenchResult]) -> None:
    """Raise (exit 1) when any host's run is partial or failed; it is already recorded as such."""
    bad = [r for r in results if r.status != "ok"]
    if bad:
        raise BenchIncomplete(
            "; ".join(
                f"{r.host}: run {r.run_id or ''} is {r.status} ("
                + ", ".join(
                    f"{k} {v}" for lv in r.levels for k, v in sorted(lv.outcomes.items()) if k != "ok"
                )
                + ") - not a clean figure"
                + (f"; {r.server_down['line']}" if r.server_down and r.server_down.get("line") else "")
                + (f"; the server changed during the run ({r.server_changed[0]})" if r.server_changed else "")
                for r in bad
            )
        )
