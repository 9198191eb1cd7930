# Streaming benchmark client, run ON the GPU host against its own server on 127.0.0.1
# (no network jitter in the figures, and never any traffic off the host).
#
# It measures and returns raw per-request timings; the laptop computes the statistics.
# Tokens are counted from the server's own fields (meta_info.completion_tokens on /generate,
# usage.completion_tokens on /v1/completions and the chat endpoint), never guessed from text.
# It also keeps what each request answered: the output token ids and the chosen tokens' logprobs
# (return_logprob on /generate, logprobs=0 + return_token_ids on /v1/completions), so two runs can be
# checked for identical outputs.
#
# The run lives here (what was asked, the server as found, warm-up, the plan's steps, the answer); one request
# and its loops are _bench_request.py, stream parsing _bench_stream.py, the server over HTTP _bench_server.py.
import itertools
import random
import sys
import threading
import time
from types import SimpleNamespace

from . import _bench_metrics
from ._bench_chat import CHAT, detokenize
from ._bench_load import Prompts, gaps, trace_gaps
from ._bench_request import LIMIT, Counter, run_batch, run_closed, run_open
from ._bench_server import (
    AUTH,
    applied_patches,
    bench_api,
    check_health,
    config_changed,
    down_line,
    served_model,
    server_down,
    server_info,
    serving,
)
from ._bench_sessions import run_sessions
from ._common import UserError, progress, server_port, try_find_sglang
from ._fetch import LOOPBACK
from ._server_proc import listening_pid, log_size, python_env, server_api_key, server_process
from ._vocab import draw_prompt_ids, model_token_space
from .telemetry import Sampler

_print_lock = threading.Lock()


def _say(**fields):
    with _print_lock:
        progress(**fields)


def prompt_ids(space, seed, n):
    """Distinct random ordinary token ids of the model per request, so the prefix cache cannot serve the
    prompt. `space` may be a test's explicit [low, high) range (unsafe on purpose: ids past the vocabulary
    kill SGLang)."""
    if isinstance(space, list):
        rng = random.Random(seed)
        return [rng.randrange(space[0], space[1]) for _ in range(n)]
    return draw_prompt_ids(space, seed, n)


# -- the run: what was asked, the server, the plan, progress,
# warm-up, measuring, the answer --------------------
def _settings(args):
    """What the laptop asked for: every bench flag under its declared name, defaults filled there
    (sglops.bench.plan sends them all), the levels, dataset and SLOs parsed there."""
    return SimpleNamespace(
        api=args["api"],
        levels=[dict(lv) for lv in args["levels"]],
        runs=int(args["runs"]),
        in_len=int(args["input_len"]),
        out_len=int(args["output_len"]),
        # per repeat and level; None: one per stream
        per_run=args["requests"],
        warmup=int(args["warmup"]),
        timeout=float(args["request_timeout"]),
        # tests only: the first request of each repeat asks for this
        override=args.get("test_sampling_override"),
        logprobs=not args["no_logprobs"],
        dataset=args["dataset"],
        duration=args["duration"],
        arrival=args["arrival"],
        burstiness=float(args["burstiness"]),
        interval=float(args["metrics_interval"] or 0),
        seed=int(args["seed"]),
        limit_s=args["request_deadline"],
        trace_speed=float(args["trace_speed"]),
    )


def _server(args):
    """Where the server is: the SGLang tree on this host
    (if any) and the port (--port, sglops' state, 30000)."""
    tree, tree_error = try_find_sglang(args.get("sglang_root"))
    root = tree["root"] if tree else None
    port, port_from = server_port(root, args.get("port"))
    return SimpleNamespace(tree=tree, tree_error=tree_error, root=root, port=port, port_from=port_from)


def _inspect(srv, args, interval):
    """The server as found before measuring (healthy, or a UserError): what it is, its process and log, the
    patches applied to its tree, the ids its model takes, and whether its /metrics can be scraped."""
    port = srv.port
    check_health(port)
    pid = listening_pid(port)
    key = (server_api_key(pid) if pid else None) or args.get("api_key")
    AUTH.clear()
    if key:
        AUTH["Authorization"] = "Bearer " + key
    _bench_metrics.AUTH.clear()
    _bench_metrics.AUTH.update(AUTH)
    # a server of an engine that keeps no /server_info says its configuration in its log and endpoints
    srv.found = serving(args, port)
    srv.info = info = server_info(port, srv.found)
    srv.model = args.get("model") or served_model(port, info)
    srv.proc = proc = server_process(port, srv.root)
    if proc and proc.get("python"):
        proc["env"] = python_env(proc["python"], proc.get("pythonpath"))
    srv.log_mark = log_size((proc or {}).get("log"))
    srv.space = args.get("test_token_range") or model_token_space(
        f"http://{LOOPBACK}:{port}", info, args.get("vocab_size"), (proc or {}).get("hf_env")
    )
    _check_dataset_ids(args.get("dataset"), srv.space)
    srv.patches = applied_patches(srv.root)
    srv.incremental = bool((info or {}).get("incremental_streaming_output"))
    srv.metrics_off = (
        _bench_metrics.available(LOOPBACK, port) if interval > 0 else "not asked (--metrics-interval 0)"
    )
    return srv


def _check_dataset_ids(dataset, space):
    """A file's input_ids must lie in the model's vocabulary: SGLang does not check them, and an id past it
    kills the server (an IndexError in the embedding lookup)."""
    if not dataset or dataset.get("kind") not in ("prompts", "trace") or not isinstance(space, dict):
        return
    high = space["high"]
    for no, item in enumerate(dataset.get("items") or [], 1):
        ids = item.get("input_ids") or item.get("ids") or []
        # a prompt's text is the server's to tokenize
        bad = None if isinstance(ids, str) else next((i for i in ids if not 0 <= i < high), None)
        if bad is not None:
            where = item.get("line") or f"prompt {no}"
            raise UserError(
                f"{dataset.get('source') or 'jsonl'}:{where}: input id {bad} is past the model's "
                f"vocabulary ({high} ids, {space.get('source')}); nothing was sent"
            )


def _plan(s):
    """The (repeat, level) steps, repeats interleaved across levels; sets each level's request count (None:
    bounded by --duration; by default one per stream, or 10 s of arrivals of an open loop)."""
    for lv in s.levels:
        c, rate = int(lv["concurrency"]), lv.get("rate")
        whole = (
            len(s.dataset["items"])
            if lv.get("trace")
            else s.dataset["count"] * s.dataset["turns"]
            if s.dataset["kind"] == "sessions"
            else (round(rate * 10) if rate else c)
        )
        lv["requests"] = None if s.duration else max(1, int(s.per_run or whole))
    return [(rep, lv) for rep in range(s.runs) for lv in s.levels]


class _Progress:
    """Live progress for the laptop every 0.5 s: the phase,
    requests done, the step of the plan, the time left."""

    def __init__(self, plan, s, counter):
        self.plan, self.runs, self.duration, self.counter = plan, s.runs, s.duration, counter
        self.total = None if s.duration else sum(lv["requests"] for _, lv in plan)
        self.phase, self.k, self.t0, self.item_t0 = "warm-up", 0, None, None
        self._stop = threading.Event()

    def start(self):
        threading.Thread(target=self._report, daemon=True).start()
        return self

    def stop(self):
        self._stop.set()

    def measuring(self):
        self.phase, self.t0 = "measuring", time.perf_counter()
        self.say()

    def step(self, k):
        self.k, self.item_t0 = k, time.perf_counter()

    def eta(self):
        """Seconds left: by requests done (a count) or by the clock (a duration per level)."""
        if self.t0 is None:
            return None
        now, done = time.perf_counter(), self.counter.done
        if self.duration:
            in_item = min(1.0, (now - self.item_t0) / self.duration) if self.item_t0 else 0.0
            return round(max(0.0, (len(self.plan) - self.k - in_item) * self.duration), 1)
        if not done:
            return None
        return round((now - self.t0) * (self.total - done) / done, 1)

    def say(self):
        rep, lv = self.plan[min(self.k, len(self.plan) - 1)]
        _say(
            phase=self.phase,
            done=self.counter.done,
            total=self.total,
            failed=self.counter.failed,
            eta_s=self.eta(),
            step=self.k + 1,
            steps=len(self.plan),
            repeat=rep + 1,
            runs=self.runs,
            concurrency=lv["concurrency"],
            request_rate=lv.get("rate"),
        )

    def _report(self):
        while not self._stop.wait(0.5):
            if self.phase == "measuring":
                self.say()
            else:
                _say(phase=self.phase, done=self.counter.done, total=self.total, failed=self.counter.failed)


def _warm_up(s, srv):
    """Per level, `warmup` waves of C requests at once (up to 32 tokens each), not counted; a server that is
    down, or a request that got nothing, ends the run here with one line."""
    warm = []
    for lv in s.levels:
        c = max(1, int(lv["concurrency"]))
        for w in range(s.warmup):
            prompts = [
                prompt_ids(srv.space, -(s.seed * 7919 + c * 131 + w * 17 + i + 1), s.in_len) for i in range(c)
            ]
            if s.api == CHAT:
                prompts = [_text_of(srv, ids) for ids in prompts]
            recs, _ = run_batch(
                srv.port,
                s.api,
                srv.model,
                prompts,
                min(s.out_len, 32),
                c,
                s.timeout,
                Counter(),
                None,
                s.logprobs,
                srv.incremental,
            )
            _warm_failed(recs, srv)
            warm.extend({"concurrency": c, "outcome": r["outcome"], "error": r["error"]} for r in recs)
    return warm


def _text_of(srv, ids):
    """The chat API's text for drawn prompt ids: the server's own decoding of them."""
    return detokenize(srv.port, srv.model, ids, AUTH)


def _warm_failed(recs, srv):
    """Raise when a warm-up wave shows the server down or a request that got no token at all."""
    if any(r["outcome"] != "ok" for r in recs):
        gone = server_down(srv.port, srv.proc, srv.log_mark)
        if gone:
            raise UserError("warm-up: " + down_line(srv.port, gone))
    for rec in recs:
        if rec["outcome"] in ("http_error", "error", "timeout") and rec["tokens"] == 0:
            raise UserError(f"warm-up request to {LOOPBACK}:{srv.port} failed: {rec['error']}")


def _level(s, srv, k, rep, lv, counter):
    """One step of the plan: a level's requests (open loop at its rate, else closed at its concurrency), with
    the server's /metrics scraped beside them; the repeat's raw entry."""
    c, rate, n = int(lv["concurrency"]), lv.get("rate"), lv["requests"]
    prompts = Prompts(
        s.dataset,
        lambda seed, m: prompt_ids(srv.space, seed, m),
        s.seed,
        s.seed * 1000003 + k * 1009,
        s.in_len,
        s.out_len,
    )

    def prompt_at(i):
        return None if n is not None and i >= n else prompts.prompt_at(i)

    deadline = time.perf_counter() + s.duration if s.duration else None
    scraper = _bench_metrics.Scraper(LOOPBACK, srv.port, s.interval).start() if not srv.metrics_off else None
    started = time.time()
    if rate or lv.get("trace"):
        arrivals = (
            trace_gaps(s.dataset["items"], s.trace_speed)
            if lv.get("trace")
            else itertools.chain([0.0], gaps(rate, s.arrival, s.burstiness, s.seed * 7 + k))
        )
        recs, wall = run_open(
            srv.port,
            s.api,
            srv.model,
            prompt_at,
            arrivals,
            s.timeout,
            counter,
            s.logprobs,
            srv.incremental,
            deadline,
            c if c > 0 else 0,
        )
    elif s.dataset["kind"] == "sessions":
        recs, wall = run_sessions(
            srv.port,
            s.api,
            srv.model,
            prompts,
            c,
            s.timeout,
            counter,
            s.logprobs,
            srv.incremental,
            deadline,
            lambda ids: _text_of(srv, ids),
        )
    else:
        recs, wall = run_closed(
            srv.port,
            s.api,
            srv.model,
            prompt_at,
            c,
            s.timeout,
            counter,
            s.override,
            s.logprobs,
            srv.incremental,
            deadline,
        )
    samples = scraper.stop() if scraper else None
    entry = {"repeat": rep, "concurrency": c, "wall_s": wall, "started": started, "requests": recs}
    if rate:
        entry.update(request_rate=rate, arrival=s.arrival, burstiness=s.burstiness)
    if lv.get("trace"):
        entry["trace_speed"] = s.trace_speed
    if s.duration:
        entry["duration_s"] = s.duration
    if samples is not None:
        entry["metrics"] = samples
    return entry


def _measure(s, srv, plan, progress, counter):
    """Every step of the plan in order; a server found down after a step with failures ends the run (the rest
    is not sent). Returns (repeats, how the server went down or None, client CPU seconds while measuring)."""
    repeats, down = [], None
    progress.measuring()
    cpu0 = time.process_time()
    for k, (rep, lv) in enumerate(plan):
        progress.step(k)
        entry = _level(s, srv, k, rep, lv, counter)
        repeats.append(entry)
        progress.say()
        if any(r["outcome"] not in ("ok", "wrong_length") for r in entry["requests"]):
            down = server_down(srv.port, srv.proc, srv.log_mark)
            if down:
                down["after_requests"] = counter.done
                down["line"] = down_line(srv.port, down)
                break
    return repeats, down, time.process_time() - cpu0


def _answer(s, srv, warm, repeats, down, cpu):
    """The JSON the laptop reads (sglops.bench.run): raw records, the server as found, what changed since."""
    changed = None if down else config_changed(srv.port, srv.info, srv.proc, srv.found)
    space = srv.space if isinstance(srv.space, dict) else {"test_range": srv.space}
    return {
        "api": s.api,
        "port": srv.port,
        "port_from": srv.port_from,
        "model": srv.model,
        "input_len": s.in_len,
        "output_len": s.out_len,
        "runs": s.runs,
        "concurrency": [lv["concurrency"] for lv in s.levels],
        "requests_per_run": {lv["concurrency"]: lv["requests"] for lv in s.levels if not lv.get("rate")},
        "levels": s.levels,
        "dataset": s.dataset,
        "duration_s": s.duration,
        "server_metrics": srv.metrics_off or "scraped",
        "metrics_interval": s.interval,
        "warmup": warm,
        "server_info": srv.info,
        "server_version": (srv.info or {}).get("version"),
        "server_process": srv.proc,
        "token_space": {
            **{k: v for k, v in space.items() if k != "special"},
            "special_ids": len(space.get("special") or []),
        },
        "sglang": srv.tree,
        "sglang_error": srv.tree_error,
        "patches": srv.patches,
        "server_down": down,
        "repeats": repeats,
        "client_cpu_s": cpu,
        "client_tokens": sum(r["tokens"] for e in repeats for r in e["requests"]),
        "logprobs": s.logprobs,
        "incremental_streaming": srv.incremental,
        "server_changed": changed,
    }


# the GIL's hand-over interval while measuring (python's 5 ms default is an open loop's p99 lag)
SWITCH_S = 0.0005


def main(args):
    """Bench the server on this host's loopback: warm up, measure every (repeat, level) step, return raw
    records. A thread due to send waits for the GIL up to the switch interval: 0.5 ms instead of 5 while
    measuring."""
    # tests: python's own, to compare
    sys.setswitchinterval(float(args.get("test_switch_interval") or SWITCH_S))
    srv = _server(args)
    s = _settings(args)
    LIMIT["s"] = s.limit_s
    _inspect(srv, args, s.interval)
    s.api = bench_api(args, srv.found)
    plan = _plan(s)
    counter = Counter()
    progress = _Progress(plan, s, counter).start()
    sampler = None
    try:
        warm = _warm_up(s, srv)
        # one sampler while measuring, stopped with it
        sampler = Sampler(args["telemetry_interval"]).start()
        repeats, down, cpu = _measure(s, srv, plan, progress, counter)
    finally:
        progress.stop()
        gpu = sampler.stop() if sampler else None
    return {**_answer(s, srv, warm, repeats, down, cpu), "telemetry": gpu}
