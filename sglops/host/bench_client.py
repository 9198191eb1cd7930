# Streaming benchmark client, run ON the GPU host against its own server on 127.0.0.1
# (no network jitter in the figures, and never any traffic off the host).
#
# It measures and returns raw per-request timings; the laptop computes the statistics.
# Tokens are counted from the server's own fields (meta_info.completion_tokens on /generate,
# usage.completion_tokens on /v1/completions), never guessed from text.
# It also keeps what each request answered: the output token ids and the chosen tokens' logprobs
# (return_logprob on /generate, logprobs=0 + return_token_ids on /v1/completions), so two runs can be
# checked for identical outputs.
import hashlib
import http.client
import json
import os
import random
import re
import socket
import threading
import time
from types import SimpleNamespace

from . import _bench_metrics, _fetch
from ._bench_load import Prompts, gaps
from ._common import UserError, progress, server_port, sglops_dir, sha256_file, tree_path, try_find_sglang
from ._server_info import MAX_COUNT, count_or_none, kept_fields, seconds_or_none
from ._server_proc import death_cause, listening_pid, log_size, python_env, server_api_key, server_process
from ._vocab import draw_prompt_ids, model_token_space

LOOPBACK = "127.0.0.1"
_META = b'"meta_info":'
_NUMBER = re.compile(rb"\s*(null|-?[0-9][0-9.eE+-]*)")
_FINISH_KEY = b'"finish_reason":'
_KEYS = ("completion_tokens", "cached_tokens", "e2e_latency")
_META_KEYS = {want: tuple((key, b'"%s":' % key.encode()) for key in _KEYS + (("prompt_tokens",) if want else ()))
              for want in (False, True)}  # the numbers a streaming /generate chunk is read for, as bytes keys
_print_lock = threading.Lock()
NL = "\n"


def _say(**fields):
    with _print_lock:
        progress(**fields)


# -- the server ------------------------------------------------------------------------------
_AUTH = {}  # the Authorization header the server's own --api-key asks for (set once per run: _inspect)
_LIMIT = {"s": None}  # seconds one request may take in all, when the run sets it (--request-deadline)


def _get(port, path, timeout=10, limit=_fetch.ANSWER_MAX):
    """(status, body) of a GET: the whole answer within `timeout` seconds and `limit` bytes."""
    return _fetch.get(port, path, timeout=timeout, limit=limit, headers=_AUTH)


def check_health(port):
    """The server must answer /health with 200 before anything is measured."""
    try:
        status, body = _get(port, "/health")
    except ConnectionRefusedError:
        raise UserError(f"no server on {LOOPBACK}:{port} (connection refused); start it or pass --port") from None
    except (TimeoutError, socket.timeout):  # noqa: UP041 (python 3.8: socket.timeout is no TimeoutError)
        raise UserError(f"server on {LOOPBACK}:{port} did not answer /health within 10 s") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise UserError(f"server on {LOOPBACK}:{port} is unreachable: {exc or type(exc).__name__}") from None
    if status != 200:
        detail = body.decode(errors="replace").strip().splitlines()[:1]
        why = f" ({detail[0][:120]})" if detail else ""
        raise UserError(f"server on {LOOPBACK}:{port} is not healthy: /health answered HTTP {status}{why}")


def server_info(port):
    """The effective launch arguments (SGLang /server_info, older /get_server_info); None for vLLM."""
    for path in ("/server_info", "/get_server_info"):
        try:
            status, body = _get(port, path, limit=_fetch.INFO_MAX)
            if status == 200:
                return kept_fields(json.loads(body))
        except (OSError, ValueError, RecursionError, http.client.HTTPException):
            pass
    return None


def served_model(port, info):
    if info:
        for key in ("served_model_name", "model_path"):
            if isinstance(info.get(key), str) and info[key]:
                return info[key]
    try:
        status, body = _get(port, "/v1/models")
        if status == 200:
            data = json.loads(body).get("data") or []
            if data and isinstance(data[0].get("id"), str):
                return data[0]["id"]
    except (OSError, ValueError, AttributeError, RecursionError, http.client.HTTPException):
        pass
    return "default"


# -- what is applied -----------------------------------------------------------------------------
def applied_patches(root):
    """Patches from the ledger, each file's current hash checked against the hash recorded after applying."""
    if not root:
        return []
    path = os.path.join(sglops_dir(root, create=False), "applied.json")
    try:
        with open(path) as fh:
            ledger = json.load(fh)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise UserError(f"patch ledger {path} is unreadable: {exc}") from None
    out = []
    for entry in ledger.get("applied") or []:
        entry = dict(entry)
        files = entry.get("files") or {}
        intact = True
        for rel, hashes in files.items():
            full = rel if os.path.isabs(rel) else tree_path(root, rel)  # installed trees lack python/
            now = sha256_file(full)
            if isinstance(hashes, dict) and hashes.get("after") and now != hashes.get("after"):
                intact = False
        entry["intact"] = intact
        out.append(entry)
    return out


# -- one request -----------------------------------------------------------------------------------
def make_body(api, model, ids, out_len, override=None, logprobs=True):
    """The request; `override` (tests only) replaces sampling fields to force a length the run did not ask for.
    `logprobs`: ask for the chosen tokens' logprobs (top-1 only; no prompt logprobs, which cost a prefill pass)."""
    if api == "sglang":
        sampling = {"max_new_tokens": out_len, "temperature": 0, "ignore_eos": True, **(override or {})}
        body = {"text" if isinstance(ids, str) else "input_ids": ids, "stream": True, "sampling_params": sampling}
        if logprobs:
            body["return_logprob"] = True
        return "/generate", body
    body = {"model": model, "prompt": ids, "max_tokens": out_len, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "return_token_ids": True}
    if logprobs:
        body["logprobs"] = 0  # the chosen token's logprob, no alternatives
    for key, value in (override or {}).items():
        body["max_tokens" if key == "max_new_tokens" else key] = value
    return "/v1/completions", body


def _number(raw):
    if raw == b"null":
        return None
    return float(raw) if any(c in raw for c in b".eE") else int(raw)


def _native_meta(data, want_prompt=False):
    """(meta, whole chunk or None) of a /generate chunk.

    A chunk still streaming (finish_reason null) carries the cumulative text, output_ids and, with
    return_logprob, every logprob so far: decoding it per chunk is O(n^2) over a request. Only the few
    numbers needed per chunk are read from its bytes (searched from the end, where SGLang puts them, after
    the logprobs); the final chunk is decoded whole once (it has the whole output's ids, logprobs and text).
    A key cannot match inside a string: quotes there are escaped."""
    at = data.find(_META)  # after the text and ids (shorter than the logprobs that follow it)
    if at >= 0:
        fin = data.find(_FINISH_KEY, at)
        m = _NUMBER.match(data, fin + len(_FINISH_KEY)) if fin >= 0 else None
        if m and m.group(1) == b"null":
            meta = {"finish_reason": None}
            for key, k in _META_KEYS[want_prompt]:
                i = data.rfind(k, at)
                m = _NUMBER.match(data, i + len(k)) if i >= 0 else None
                if m:
                    meta[key] = _number(m.group(1))
            if isinstance(meta.get("completion_tokens"), int):
                return meta, None
    obj = json.loads(data)
    return (obj.get("meta_info") if isinstance(obj, dict) else None), obj


def _native_outputs(obj, rec, incremental):
    """The output ids, chosen-token logprobs and text a /generate chunk carries (cumulative unless the server
    streams incrementally, --incremental-streaming-output)."""
    if not isinstance(obj, dict):
        return
    meta = obj.get("meta_info") if isinstance(obj.get("meta_info"), dict) else {}
    ids = obj.get("output_ids")
    lps = meta.get("output_token_logprobs")
    text = obj.get("text")
    if incremental:
        if ids is not None:
            rec["ids"] = (rec["ids"] or []) + list(ids)
        if lps is not None:
            rec["logprobs"] = (rec["logprobs"] or []) + [e[0] if isinstance(e, list) else None for e in lps]
        if isinstance(text, str):
            rec["text"] = (rec["text"] or "") + text
        return
    if ids is not None:
        rec["ids"] = list(ids)
    if lps is not None:  # [logprob, token id, text or null] per token
        rec["logprobs"] = [e[0] if isinstance(e, list) and e else None for e in lps]
        if rec["ids"] is None:
            rec["ids"] = [e[1] for e in lps]
    if isinstance(text, str):
        rec["text"] = text


def _openai_outputs(choice, rec):
    """Token ids (return_token_ids), chosen-token logprobs and per-token text of one /v1/completions chunk."""
    ids = choice.get("token_ids")
    if ids is not None:
        rec["ids"] = (rec["ids"] or []) + list(ids)
    lp = choice.get("logprobs")
    if isinstance(lp, dict):
        if lp.get("token_logprobs") is not None:
            rec["logprobs"] = (rec["logprobs"] or []) + list(lp["token_logprobs"])
        if lp.get("tokens") is not None:
            rec["tokens_text"] = (rec["tokens_text"] or []) + list(lp["tokens"])
    if choice.get("text"):
        rec["text"] = (rec["text"] or "") + choice["text"]


def ids_hash(ids):
    """sha256 over the comma-joined ids, 16 hex digits (sglops.bench.identity.ids_hash: the same on the laptop)."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def prompt_hash(prompt):
    """A prompt's key for output identity: ids_hash of its ids, or of a text prompt's UTF-8 (prefixed, so a
    text can never share a key with ids)."""
    if isinstance(prompt, str):
        return "t" + hashlib.sha256(prompt.encode()).hexdigest()[:15]
    return ids_hash(prompt)


# -- one request's HTTP, straight on the socket (sglops/host/_fetch.py) ----------------------------------------
# http.client parses every response's headers through the email package and sends a request in pieces: about
# half of the client's CPU per request at 1,000 requests/s (cProfile on CPU time, docs/bench.md). One POST on a
# fresh loopback connection (bench_serving too opens one per request) and the body's chunked framing need far less.


_SKIP, _TEXT = object(), object()  # a chunk that carries no count: ignore it / a text chunk of unknown count


def _native_chunk(data, rec, incremental):
    """The cumulative completion_tokens of one /generate chunk, noting its fields in rec; None: stop (rec says
    why)."""
    meta, obj = (_native_meta(data, rec["prompt_tokens"] is None) if not incremental else (None, json.loads(data)))
    if incremental and isinstance(obj, dict):
        meta = obj.get("meta_info")
    if obj is not None:
        _native_outputs(obj, rec, incremental)
    if not isinstance(meta, dict):
        err = (obj or {}).get("error") if isinstance(obj, dict) else None
        rec.update(outcome="error", error=f"server error: {str(err or 'chunk without meta_info')[:200]}")
        return None
    if rec["prompt_tokens"] is None:
        rec["prompt_tokens"] = meta.get("prompt_tokens")
    if meta.get("e2e_latency") is not None:
        rec["server_e2e_s"] = meta["e2e_latency"]
    if meta.get("finish_reason"):
        rec["finish"] = meta["finish_reason"]
    if meta.get("cached_tokens") is not None:
        rec["cached_tokens"] = meta["cached_tokens"]
    if meta.get("decode_throughput") is not None:  # the server's own decode rate (--enable-metrics)
        rec["server_decode_tok_s"] = meta["decode_throughput"]
    n = meta.get("completion_tokens")
    if type(n) is int and 0 <= n <= MAX_COUNT:  # checked inline: once per chunk
        return n
    return _tokens_or_stop(n, rec)


def _checked(rec):
    """The server's own fields of a request's record, each as a number in range or None, once it ended (per
    chunk they are only copied: the last one counts)."""
    rec["prompt_tokens"] = count_or_none(rec["prompt_tokens"])
    rec["cached_tokens"] = count_or_none(rec["cached_tokens"])
    rec["server_e2e_s"] = seconds_or_none(rec["server_e2e_s"])
    if "server_decode_tok_s" in rec:
        rec["server_decode_tok_s"] = seconds_or_none(rec["server_decode_tok_s"])
    if rec["finish"] is not None:
        rec["finish"] = _finish(rec["finish"])


def _tokens_or_stop(n, rec):
    """The server's cumulative completion_tokens, or None (the request ends, rec says why)."""
    if n is None:
        rec.update(outcome="error", error="server sent no completion_tokens; cannot count tokens")
        return None
    if count_or_none(n) is None:
        rec.update(outcome="error", error=f"server sent an impossible completion_tokens {str(n)[:40]!r}")
        return None
    return n


def _finish(value):
    """A finish reason as the server gave it (a string or SGLang's {type, ...}), bounded in size."""
    if isinstance(value, dict):
        return {str(k)[:40]: v if v is None or isinstance(v, (bool, float)) or count_or_none(v) is not None
                else str(v)[:200] for k, v in list(value.items())[:8]}
    return str(value)[:200]


def _openai_chunk(data, rec, state):
    """The cumulative usage.completion_tokens of one /v1/completions chunk, _SKIP, _TEXT (a text chunk without
    per-chunk usage) or None: stop (rec says why). The final usage chunk's count goes to state["final_n"]."""
    obj = json.loads(data)
    if not isinstance(obj, dict) or obj.get("error") or obj.get("object") == "error":
        rec.update(outcome="error", error=f"server error: {str(obj.get('error') if isinstance(obj, dict) else obj)[:200]}")
        return None
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    choices = obj.get("choices") if isinstance(obj.get("choices"), list) else []
    n = usage.get("completion_tokens")
    if n is not None and count_or_none(n) is None:
        return _tokens_or_stop(n, rec)
    if usage.get("prompt_tokens") is not None:
        rec["prompt_tokens"] = usage["prompt_tokens"]
    details = usage.get("prompt_tokens_details")  # SGLang with --enable-cache-report, vLLM
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        rec["cached_tokens"] = details["cached_tokens"]
    if not choices or not isinstance(choices[0], dict):  # the final usage chunk (or a keep-alive)
        if n is not None:
            state["final_n"] = n
        return _SKIP
    _openai_outputs(choices[0], rec)
    if choices[0].get("finish_reason"):
        rec["finish"] = choices[0]["finish_reason"]
    if n is None:
        return _TEXT if choices[0].get("text") else _SKIP
    return n


def _settle(rec, api, done, final_n, last_n, out_len):
    """The request's outcome once its stream ended: tokens counted, finished, of the length asked."""
    rec["tokens"] = final_n if final_n is not None else last_n
    if api == "openai" and final_n is None and rec["outcome"] == "ok" and rec["chunk_t"]:
        rec.update(outcome="error", error="server sent no usage (stream_options.include_usage ignored?); "
                   "cannot count tokens")
    if rec["outcome"] != "ok":
        return
    finish = rec["finish"]
    kind = finish.get("type") if isinstance(finish, dict) else finish
    if not done and not finish:
        rec.update(outcome="dropped", error=f"stream ended after {rec['tokens']} tokens without finishing")
    elif kind == "abort":
        rec.update(outcome="error", error=f"server aborted: {str(finish)[:200]}")
    elif rec["tokens"] != out_len:
        rec.update(outcome="wrong_length", error=f"{rec['tokens']} tokens, {out_len} asked (finish: {kind}; "
                   "ignore_eos not honoured?)")


FLOOR_TOK_S = 1.0  # a request slower than this per output token (after `timeout` for its first) is given up


def request_seconds(timeout, out_len, floor_tok_s=FLOOR_TOK_S):
    """How long one request may take in all: the wait for its first data, then its output at the floor rate. A
    stream that keeps sending (tokens without a finish, keep-alive comments, a byte at a time) ends there."""
    return float(timeout) + out_len / float(floor_tok_s)


def one_request(port, api, model, ids, out_len, timeout, override=None, logprobs=True, incremental=False,
                limit_s=None):
    """Stream one request and keep its raw timeline: each chunk that carried tokens as (arrival, cumulative
    count). Counts are the server's (meta_info / usage.completion_tokens), never counted from text; the
    laptop turns the timeline into TTFT, ITL, TPOT (sglops/bench/run.py), so a recorded run can be re-analysed.
    On /v1/completions without per-chunk usage, text chunks are kept with count None.
    What it answered is kept too: `ids`, `logprobs` (chosen tokens), `text` (and `tokens`, per-token text,
    where the API gives it), with `prompt`, the hash of the exact input ids. The whole request ends within
    `limit_s` seconds (default request_seconds: from the output length at a floor rate)."""
    path, body = make_body(api, model, ids, out_len, override, logprobs)
    payload = json.dumps(body).encode()
    rec = {"outcome": "ok", "error": None, "e2e_s": None, "tokens": 0, "prompt_tokens": None, "chunk_t": [],
           "chunk_n": [], "server_e2e_s": None, "finish": None, "cached_tokens": None, "out_len": out_len,
           "prompt": prompt_hash(ids), "input_ids": ids, "ids": None, "logprobs": None, "text": None, "tokens_text": None}
    cpu0 = time.thread_time()
    st = time.perf_counter()
    state, sock = {"last_n": 0, "done": False, "final_n": None}, None
    why = "set by --request-deadline" if limit_s else f"{timeout:g} s + {out_len} tokens at {FLOOR_TOK_S:g} tok/s"
    limit_s = float(limit_s) if limit_s else request_seconds(timeout, out_len)
    deadline = st + limit_s
    try:
        sock, status, headers, rest = _fetch.open_post(port, path, payload, timeout, deadline, _AUTH)
        if status != 200:
            text = _error_text(_fetch.body(sock, headers, rest, deadline, timeout))
            rec.update(outcome="http_error", error=f"HTTP {status}: {text.replace(NL, ' ')[:200]}")
            return rec
        _read_events(_fetch.lines(_fetch.body(sock, headers, rest, deadline, timeout)), api, rec, incremental, st,
                     state)
    except _fetch.Late:
        rec.update(outcome="timeout", error=f"no finish within {limit_s:g} s (the request's deadline: {why}), "
                   f"{state['last_n']} tokens by then")
    except (TimeoutError, socket.timeout):  # noqa: UP041 (python 3.8 on a host: socket.timeout is no TimeoutError)
        rec.update(outcome="timeout", error=f"no data for {timeout:g} s")
    except RecursionError:
        rec.update(outcome="error", error="server sent JSON nested too deep to read")
    except (OSError, http.client.HTTPException, ValueError, TypeError, AttributeError, KeyError,
            IndexError) as exc:  # an answer of any shape ends this request, in its record
        if rec["chunk_t"]:
            rec.update(outcome="dropped", error=f"stream dropped after {state['last_n']} tokens ({type(exc).__name__})")
        else:
            rec.update(outcome="error", error=f"{type(exc).__name__}: {exc}")
    finally:
        if sock is not None:
            sock.close()
        _checked(rec)
        rec["cpu_s"] = time.thread_time() - cpu0
    _settle(rec, api, state["done"], state["final_n"], state["last_n"], out_len)
    return rec


def _error_text(blocks, most=4096):
    """The start of an error answer's body (a body that never ends is not read to its end)."""
    got = b""
    for _, block in blocks:
        got += block
        if len(got) >= most:
            break
    return got[:most].decode(errors="replace").strip()


def _read_events(events, api, rec, incremental, st, state):
    """Each `data:` event into rec: the (arrival - st, cumulative count) timeline, the outputs, the finish.
    `state`: last_n (the count so far), done ([DONE] seen), final_n (a final usage chunk's count)."""
    chunk_t, chunk_n = rec["chunk_t"], rec["chunk_n"]
    now = st
    for now, line in events:
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            state["done"] = True
            break
        n = _native_chunk(data, rec, incremental) if api == "sglang" else _openai_chunk(data, rec, state)
        if n is None:
            break
        if n is _SKIP:
            continue
        if n is _TEXT:
            chunk_t.append(round(now - st, 6))
            chunk_n.append(None)
        elif n > state["last_n"]:
            chunk_t.append(round(now - st, 6))
            chunk_n.append(n)
            state["last_n"] = n
    rec["e2e_s"] = round(now - st, 6)


# -- a batch of requests at a concurrency -------------------------------------------------------------
class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.done = self.failed = 0


def run_batch(port, api, model, prompts, out_len, concurrency, timeout, counter, override=None, logprobs=True,
              incremental=False):
    """Send the prompts with `concurrency` streams in flight; returns (records, wall seconds)."""
    items = [(p, out_len) for p in prompts]
    return run_closed(port, api, model, lambda i: items[i] if i < len(items) else None, concurrency, timeout,
                      counter, override, logprobs, incremental)


def _request(port, api, model, item, timeout, counter, override, logprobs, incremental):
    rec = one_request(port, api, model, item[0], item[1], timeout, override, logprobs, incremental, _LIMIT["s"])
    with counter.lock:
        counter.done += 1
        counter.failed += rec["outcome"] != "ok"
    return rec


def run_closed(port, api, model, prompt_at, concurrency, timeout, counter, override=None, logprobs=True,
               incremental=False, deadline=None):
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
            rec = _request(port, api, model, item, timeout, counter, override if i == 0 else None, logprobs,
                           incremental)
            rec["start_s"] = t0
            records[i] = rec

    t0 = time.perf_counter()
    width = concurrency if deadline is not None else min(concurrency, _count(prompt_at, concurrency))
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, width))]
    for t in threads:
        t.start()
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


def run_open(port, api, model, prompt_at, rate, arrival, burstiness, seed, timeout, counter, logprobs=True,
             incremental=False, deadline=None, max_in_flight=0):
    """Open loop: request i is sent at its arrival time whatever the others are doing (Poisson or constant
    arrivals at `rate` per second), until prompt_at(i) is None or the next arrival falls after `deadline`.
    Each record keeps `sched_s` (when it was due) and `lag_s` (how late the client sent it: a client that
    cannot keep up shows here first). `max_in_flight` > 0 caps the requests in flight (arrivals then wait).
    Returns (records in arrival order, wall seconds from the first arrival to the last request's end)."""
    records = {}
    threads = []
    cap = threading.Semaphore(max_in_flight) if max_in_flight else None

    def send(i, item, due):
        try:
            start = time.perf_counter()
            rec = _request(port, api, model, item, timeout, counter, None, logprobs, incremental)
            rec["start_s"], rec["sched_s"], rec["lag_s"] = start, due, round(start - t0 - due, 6)
            records[i] = rec
        finally:
            if cap:
                cap.release()

    t0 = time.perf_counter()
    due = 0.0
    arrivals = gaps(rate, arrival, burstiness, seed)
    i = 0
    while True:
        if deadline is not None and t0 + due >= deadline:
            break
        item = prompt_at(i)
        if item is None:
            break
        wait = t0 + due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if cap:
            cap.acquire()
        t = threading.Thread(target=send, args=(i, item, round(due, 6)), daemon=True)
        t.start()
        threads.append(t)
        i += 1
        due += next(arrivals)
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    out = [records[k] for k in sorted(records)]
    for rec in out:
        rec["start_s"] = round(rec["start_s"] - t0, 6)
    return out, wall


# -- a server that stops answering ------------------------------------------------------------------------
def _health(port):
    """(state, what /health said): ok, died (nothing listens) or unhealthy (answers, but not 200, or hangs)."""
    try:
        status, _ = _get(port, "/health", timeout=5)
        if status == 200:
            return "ok", "HTTP 200"
        return "unhealthy", f"/health answered HTTP {status}"
    except ConnectionRefusedError:
        return "died", "connection refused"
    except TimeoutError:
        return "unhealthy", "/health did not answer within 5 s"
    except (OSError, http.client.HTTPException) as exc:
        return "going", type(exc).__name__  # a server going down resets connections before it stops listening


def server_down(port, proc, log_mark):
    """None while /health answers 200; else what happened: died (with the cause from its log) or unhealthy."""
    state, health = _health(port)
    for _ in range(6):  # a server on its way down: ask again until it is gone or back
        if state != "going":
            break
        time.sleep(0.5)
        state, health = _health(port)
    if state == "ok":
        return None
    if state == "going":
        state = "died"
    if proc and proc.get("pid") and not os.path.exists(f"/proc/{proc['pid']}"):
        state = "died"
    log = (proc or {}).get("log")
    if state == "died" and log:
        time.sleep(0.5)  # the launcher writes the scheduler's traceback as it goes down
    return {"state": state, "health": health, "pid": (proc or {}).get("pid"), "log": log,
            "cause": death_cause(log, log_mark) if log else None}


def down_line(port, down):
    what = "died" if down["state"] == "died" else "stopped answering"
    if down.get("cause"):
        cause = f": {down['cause']}"
    elif down.get("log") and down["state"] == "died":
        cause = ": no error in its log since the run began (killed by a signal? out of memory?)"
    else:
        cause = ""
    where = f"log: {down['log']}" if down.get("log") else "its log is unknown (not started by sglops, stdout not a file)"
    return f"the server on {LOOPBACK}:{port} {what} ({down['health']}){cause}; {where}"


_VOLATILE = {"last_gen_throughput", "status", "internal_states"}  # live state, not configuration


def config_changed(port, before, proc):
    """After measuring: did another server (or another configuration) answer than the one recorded before?
    A restart mid-run mixes two servers in one figure. Returns what differs, or None."""
    out = []
    after = server_info(port)
    if before is not None and after is not None:
        for key in sorted(set(before) | set(after)):
            if key not in _VOLATILE and before.get(key) != after.get(key):
                out.append(f"{key} {str(before.get(key))[:60]} -> {str(after.get(key))[:60]}")
    now = listening_pid(port) if proc and proc.get("pid") else None
    if now and now != proc["pid"]:
        out.insert(0, f"server pid {proc['pid']} -> {now}")
    return out or None


def prompt_ids(space, seed, n):
    """Distinct random ordinary token ids of the model per request, so the prefix cache cannot serve the prompt.
    `space` may be a test's explicit [low, high) range (unsafe on purpose: ids past the vocabulary kill SGLang)."""
    if isinstance(space, list):
        rng = random.Random(seed)
        return [rng.randrange(space[0], space[1]) for _ in range(n)]
    return draw_prompt_ids(space, seed, n)


# -- the run: what was asked, the server, the plan, progress, warm-up, measuring, the answer --------------------
def _settings(args):
    """What the laptop asked for (it always sends runs and lengths: sglops.bench.params has their defaults)."""
    api = args.get("api") or "sglang"
    if api not in ("sglang", "openai"):
        raise UserError(f"unknown api {api!r} (sglang or openai)")
    levels = [dict(lv) for lv in args.get("levels") or []] or [{"concurrency": int(c), "rate": None}
                                                                for c in args.get("concurrency") or [1]]
    return SimpleNamespace(
        api=api, levels=levels, runs=int(args["runs"]), in_len=int(args["input_len"]),
        out_len=int(args["output_len"]), per_run=args.get("requests"),  # per repeat and level; default one per stream
        warmup=int(args.get("warmup", 1)), timeout=float(args.get("request_timeout", 120)),
        override=args.get("test_sampling_override"),  # tests only: the first request of each repeat asks for this
        logprobs=bool(args.get("logprobs", True)), dataset=args.get("dataset") or {"kind": "random"},
        duration=float(args["duration_s"]) if args.get("duration_s") else None,
        arrival=args.get("arrival") or "poisson", burstiness=float(args.get("burstiness") or 1.0),
        interval=float(args.get("metrics_interval") or 0), seed=int(args.get("seed", 0)),
        limit_s=float(args["request_deadline"]) if args.get("request_deadline") else None)


def _server(args):
    """Where the server is: the SGLang tree on this host (if any) and the port (--port, sglops' state, 30000)."""
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
    _AUTH.clear()
    if key:
        _AUTH["Authorization"] = "Bearer " + key
    _bench_metrics.AUTH.clear()
    _bench_metrics.AUTH.update(_AUTH)
    srv.info = info = server_info(port)
    srv.model = args.get("model") or served_model(port, info)
    srv.proc = proc = server_process(port, srv.root)
    if proc and proc.get("python"):
        proc["env"] = python_env(proc["python"], proc.get("pythonpath"))
    srv.log_mark = log_size((proc or {}).get("log"))
    srv.space = args.get("test_token_range") or model_token_space(f"http://{LOOPBACK}:{port}", info,
                                                                  args.get("vocab_size"), (proc or {}).get("hf_env"))
    _check_dataset_ids(args.get("dataset"), srv.space)
    srv.patches = applied_patches(srv.root)
    srv.incremental = bool((info or {}).get("incremental_streaming_output"))
    srv.metrics_off = (_bench_metrics.available(LOOPBACK, port) if interval > 0
                       else "not asked (--metrics-interval 0)")
    return srv


def _check_dataset_ids(dataset, space):
    """A file's input_ids must lie in the model's vocabulary: SGLang does not check them, and an id past it kills
    the server (an IndexError in the embedding lookup)."""
    if not dataset or dataset.get("kind") != "prompts" or not isinstance(space, dict):
        return
    high = space["high"]
    for no, item in enumerate(dataset.get("items") or [], 1):
        bad = next((i for i in item.get("input_ids") or [] if not 0 <= i < high), None)
        if bad is not None:
            where = item.get("line") or f"prompt {no}"
            raise UserError(f"{dataset.get('source') or 'jsonl'}:{where}: input id {bad} is past the model's "
                            f"vocabulary ({high} ids, {space.get('source')}); nothing was sent")


def _plan(s):
    """The (repeat, level) steps, repeats interleaved across levels; sets each level's request count (None:
    bounded by --duration; by default one per stream, or 10 s of arrivals of an open loop)."""
    for lv in s.levels:
        c, rate = int(lv["concurrency"]), lv.get("rate")
        lv["requests"] = None if s.duration else max(1, int(s.per_run or (round(rate * 10) if rate else c)))
    return [(rep, lv) for rep in range(s.runs) for lv in s.levels]


class _Progress:
    """Live progress for the laptop every 0.5 s: the phase, requests done, the step of the plan, the time left."""

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
        _say(phase=self.phase, done=self.counter.done, total=self.total, failed=self.counter.failed, eta_s=self.eta(),
             step=self.k + 1, steps=len(self.plan), repeat=rep + 1, runs=self.runs, concurrency=lv["concurrency"],
             request_rate=lv.get("rate"))

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
            prompts = [prompt_ids(srv.space, -(s.seed * 7919 + c * 131 + w * 17 + i + 1), s.in_len) for i in range(c)]
            recs, _ = run_batch(srv.port, s.api, srv.model, prompts, min(s.out_len, 32), c, s.timeout, Counter(),
                                None, s.logprobs, srv.incremental)
            _warm_failed(recs, srv)
            warm.extend({"concurrency": c, "outcome": r["outcome"], "error": r["error"]} for r in recs)
    return warm


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
    prompts = Prompts(s.dataset, lambda seed, m: prompt_ids(srv.space, seed, m), s.seed, s.seed * 1000003 + k * 1009,
                      s.in_len, s.out_len)

    def prompt_at(i):
        return None if n is not None and i >= n else prompts.prompt_at(i)

    deadline = time.perf_counter() + s.duration if s.duration else None
    scraper = _bench_metrics.Scraper(LOOPBACK, srv.port, s.interval).start() if not srv.metrics_off else None
    started = time.time()
    if rate:
        recs, wall = run_open(srv.port, s.api, srv.model, prompt_at, rate, s.arrival, s.burstiness, s.seed * 7 + k,
                              s.timeout, counter, s.logprobs, srv.incremental, deadline, c if c > 0 else 0)
    else:
        recs, wall = run_closed(srv.port, s.api, srv.model, prompt_at, c, s.timeout, counter, s.override,
                                s.logprobs, srv.incremental, deadline)
    samples = scraper.stop() if scraper else None
    entry = {"repeat": rep, "concurrency": c, "wall_s": wall, "started": started, "requests": recs}
    if rate:
        entry.update(request_rate=rate, arrival=s.arrival, burstiness=s.burstiness)
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
    changed = None if down else config_changed(srv.port, srv.info, srv.proc)
    space = srv.space if isinstance(srv.space, dict) else {"test_range": srv.space}
    return {
        "api": s.api, "port": srv.port, "port_from": srv.port_from, "model": srv.model, "input_len": s.in_len,
        "output_len": s.out_len, "runs": s.runs, "concurrency": [lv["concurrency"] for lv in s.levels],
        "requests_per_run": {lv["concurrency"]: lv["requests"] for lv in s.levels if not lv.get("rate")},
        "levels": s.levels, "dataset": s.dataset, "duration_s": s.duration,
        "server_metrics": srv.metrics_off or "scraped", "metrics_interval": s.interval, "warmup": warm,
        "server_info": srv.info, "server_version": (srv.info or {}).get("version"), "server_process": srv.proc,
        "token_space": {**{k: v for k, v in space.items() if k != "special"},
                        "special_ids": len(space.get("special") or [])},
        "sglang": srv.tree, "sglang_error": srv.tree_error, "patches": srv.patches, "server_down": down,
        "repeats": repeats, "client_cpu_s": cpu, "client_tokens": sum(r["tokens"] for e in repeats
                                                                       for r in e["requests"]),
        "logprobs": s.logprobs, "incremental_streaming": srv.incremental, "server_changed": changed,
    }


def main(args):
    """Bench the server on this host's loopback: warm up, measure every (repeat, level) step, return raw records."""
    srv = _server(args)
    s = _settings(args)
    _LIMIT["s"] = s.limit_s
    _inspect(srv, args, s.interval)
    plan = _plan(s)
    counter = Counter()
    progress = _Progress(plan, s, counter).start()
    try:
        warm = _warm_up(s, srv)
        repeats, down, cpu = _measure(s, srv, plan, progress, counter)
    finally:
        progress.stop()
    return _answer(s, srv, warm, repeats, down, cpu)
