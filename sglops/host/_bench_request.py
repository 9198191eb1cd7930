# One request and the loops that send them: the request's body, its HTTP stream (sglops/host/_fetch.py) read
# into a record (sglops/host/_bench_stream.py) within its deadline, closed and open loops of requests.
# Straight on the socket, not http.client: http.client parses every response's headers through the email
# package and sends a request in pieces: about half of the client's CPU per request at 1,000 requests/s
# (cProfile on CPU time, docs/bench.md). One POST on a fresh loopback connection (bench_serving too opens one
# per request) and the body's chunked framing need far less.
import http.client
import json
import socket
import threading
import time

from . import _fetch
from ._bench_chat import CHAT, chat_body
from ._bench_server import AUTH
from ._bench_stream import checked, error_text, prompt_hash, read_events, settle

NL = "\n"
LIMIT = {"s": None}
# an open loop's thread is started this early and sleeps to its arrival: its start-up is not lag # seconds one
# request may take in all, when the run sets it (--request-deadline)
LEAD_S = 0.01


def make_body(api, model, ids, out_len, override=None, logprobs=True):
    """The request; `override` (tests only) replaces sampling fields to force a length the run did not ask
    for. `logprobs`: ask for the chosen tokens' logprobs (top-1 only; no prompt logprobs, which cost a prefill
    pass)."""
    if api == "sglang":
        sampling = {"max_new_tokens": out_len, "temperature": 0, "ignore_eos": True, **(override or {})}
        body = {
            "text" if isinstance(ids, str) else "input_ids": ids,
            "stream": True,
            "sampling_params": sampling,
        }
        if logprobs:
            body["return_logprob"] = True
        return "/generate", body
    if api == CHAT:
        return chat_body(model, ids, out_len, logprobs)
    body = {
        "model": model,
        "prompt": ids,
        "max_tokens": out_len,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_token_ids": True,
    }
    if logprobs:
        # the chosen token's logprob, no alternatives
        body["logprobs"] = 0
    for key, value in (override or {}).items():
        body["max_tokens" if key == "max_new_tokens" else key] = value
    return "/v1/completions", body


# a request slower than this per output token (after `timeout` for its first) is given up
FLOOR_TOK_S = 1.0


def request_seconds(timeout, out_len, floor_tok_s=FLOOR_TOK_S):
    """How long one request may take in all: the wait for its first data, then its output at the floor rate. A
    stream that keeps sending (tokens without a finish, keep-alive comments, a byte at a time) ends there."""
    return float(timeout) + out_len / float(floor_tok_s)


def one_request(
    port, api, model, ids, out_len, timeout, override=None, logprobs=True, incremental=False, limit_s=None
):
    """Stream one request and keep its raw timeline: each chunk that carried tokens as (arrival, cumulative
    count). Counts are the server's (meta_info / usage.completion_tokens), never counted from text; the
    laptop turns the timeline into TTFT, ITL, TPOT (sglops/bench/run.py), so a recorded run can be
    re-analysed. On /v1/completions without per-chunk usage, text chunks are kept with count None.
    What it answered is kept too: `ids`, `logprobs` (chosen tokens), `text` (and `tokens`, per-token text,
    where the API gives it), with `prompt`, the hash of the exact input ids. The whole request ends within
    `limit_s` seconds (default request_seconds: from the output length at a floor rate)."""
    path, body = make_body(api, model, ids, out_len, override, logprobs)
    payload = json.dumps(body).encode()
    rec = {
        "outcome": "ok",
        "error": None,
        "e2e_s": None,
        "tokens": 0,
        "prompt_tokens": None,
        "chunk_t": [],
        "chunk_n": [],
        "server_e2e_s": None,
        "finish": None,
        "cached_tokens": None,
        "out_len": out_len,
        "prompt": prompt_hash(ids),
        "input_ids": ids,
        "ids": None,
        "logprobs": None,
        "text": None,
        "tokens_text": None,
    }
    cpu0 = time.thread_time()
    st = time.perf_counter()
    state, sock = {"last_n": 0, "done": False, "final_n": None}, None
    why = (
        "set by --request-deadline"
        if limit_s
        else f"{timeout:g} s + {out_len} tokens at {FLOOR_TOK_S:g} tok/s"
    )
    limit_s = float(limit_s) if limit_s else request_seconds(timeout, out_len)
    deadline = st + limit_s
    try:
        sock, status, headers, rest = _fetch.open_post(port, path, payload, timeout, deadline, AUTH)
        if status != 200:
            text = error_text(_fetch.body(sock, headers, rest, deadline, timeout))
            rec.update(outcome="http_error", error=f"HTTP {status}: {text.replace(NL, ' ')[:200]}")
            return rec
        read_events(
            _fetch.lines(_fetch.body(sock, headers, rest, deadline, timeout)),
            api,
            rec,
            incremental,
            st,
            state,
        )
    except _fetch.Late:
        rec.update(
            outcome="timeout",
            error=f"no finish within {limit_s:g} s (the request's deadline: {why}), "
            f"{state['last_n']} tokens by then",
        )
    # python 3.8 on a host: socket.timeout is no TimeoutError
    except (TimeoutError, socket.timeout):  # noqa: UP041
        rec.update(outcome="timeout", error=f"no data for {timeout:g} s")
    except RecursionError:
        rec.update(outcome="error", error="server sent JSON nested too deep to read")
    # an answer of any shape ends this request, in its record
    except (
        OSError,
        http.client.HTTPException,
        ValueError,
        TypeError,
        AttributeError,
        KeyError,
        IndexError,
    ) as exc:
        if rec["chunk_t"]:
            rec.update(
                outcome="dropped",
                error=f"stream dropped after {state['last_n']} tokens ({type(exc).__name__})",
            )
        else:
            rec.update(outcome="error", error=f"{type(exc).__name__}: {exc}")
    finally:
        if sock is not None:
            sock.close()
        checked(rec)
        rec["cpu_s"] = time.thread_time() - cpu0
    settle(rec, api, state["done"], state["final_n"], state["last_n"], out_len)
    return rec


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.done = self.failed = 0


def run_batch(
    port,
    api,
    model,
    prompts,
    out_len,
    concurrency,
    timeout,
    counter,
    override=None,
    logprobs=True,
    incremental=False,
):
    """Send the prompts with `concurrency` streams in flight; returns (records, wall seconds)."""
    items = [(p, out_len) for p in prompts]
    return run_closed(
        port,
        api,
        model,
        lambda i: items[i] if i < len(items) else None,
        concurrency,
        timeout,
        counter,
        override,
        logprobs,
        incremental,
    )


def counted_request(port, api, model, item, timeout, counter, override, logprobs, incremental):
    rec = one_request(
        port, api, model, item[0], item[1], timeout, override, logprobs, incremental, LIMIT["s"]
    )
    with counter.lock:
        counter.done += 1
        counter.failed += rec["outcome"] != "ok"
    return rec


def run_closed(
    port,
    api,
    model,
    prompt_at,
    concurrency,
    timeout,
    counter,
    override=None,
    logprobs=True,
    incremental=False,
    deadline=None,
):
    """Closed loop: `concurrency` streams, each sending its next request when the last one ended, until
    prompt_at(i) is None (a count) or `deadline` (perf_counter seconds: a duration) passes.
    Returns (records in the order sent, wall seconds)."""
    records = {}
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if deadline is not None and time.perf_counter() >= deadline:
                return
            item = prompt_at(i)
            if item is None:
                return
            t0 = time.perf_counter()
            rec = counted_request(
                port, api, model, item, timeout, counter, override if i == 0 else None, logprobs, incremental
            )
            rec["start_s"] = t0
            records[i] = rec

    t0 = time.perf_counter()
    width = concurrency if deadline is not None else min(concurrency, _count(prompt_at, concurrency))
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, width))]
    for t in threads:
        t.start()
    return joined(threads, records, t0)


def joined(threads, records, t0):
    """Both loops' end: every request done, (records in request order with start_s from t0, wall seconds)."""
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    out = [records[i] for i in sorted(records)]
    for rec in out:
        rec["start_s"] = round(rec["start_s"] - t0, 6)
    return out, wall


def _count(prompt_at, most):
    """How many of the first `most` prompts exist (a level of fewer requests than streams)."""
    n = 0
    while n < most and prompt_at(n) is not None:
        n += 1
    return n


def run_open(
    port,
    api,
    model,
    prompt_at,
    arrivals,
    timeout,
    counter,
    logprobs=True,
    incremental=False,
    deadline=None,
    max_in_flight=0,
):
    """Open loop: request i is sent at its arrival time whatever the others are doing (`arrivals`: the gaps
    before each request, seconds: a rate's Poisson or constant draws, or a trace's own), until prompt_at(i) is
    None or the next arrival falls after `deadline`.
    Each record keeps `sched_s` (when it was due) and `lag_s` (how late the client sent it: a client that
    cannot keep up shows here first). Each request's thread starts LEAD_S before its arrival and sleeps to it,
    so a thread's start-up is not counted as lag. `max_in_flight` > 0 caps the requests in flight (arrivals
    then wait). Returns (records in arrival order, wall seconds from the first arrival to the last request's
    end)."""
    records = {}
    threads = []
    cap = threading.Semaphore(max_in_flight) if max_in_flight else None

    def send(i, item, due):
        try:
            wait = t0 + due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            start = time.perf_counter()
            rec = counted_request(port, api, model, item, timeout, counter, None, logprobs, incremental)
            rec["start_s"], rec["sched_s"], rec["lag_s"] = start, due, round(start - t0 - due, 6)
            records[i] = rec
        finally:
            if cap:
                cap.release()

    t0 = time.perf_counter() + LEAD_S
    arrivals = iter(arrivals)
    due = next(arrivals, 0.0)
    i = 0
    while True:
        if deadline is not None and t0 + due >= deadline:
            break
        item = prompt_at(i)
        if item is None:
            break
        wait = t0 + due - LEAD_S - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if cap:
            cap.acquire()
        t = threading.Thread(target=send, args=(i, item, round(due, 6)), daemon=True)
        t.start()
        threads.append(t)
        i += 1
        due += next(arrivals, 0.0)
    return joined(threads, records, t0)
