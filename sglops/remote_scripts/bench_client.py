# sglops: include _common
# Streaming benchmark client, run ON the GPU host against its own server on 127.0.0.1
# (no network jitter in the figures, and never any traffic off the host).
#
# It measures and returns raw per-request timings; the laptop computes the statistics.
# Tokens are counted from the server's own fields (meta_info.completion_tokens on /generate,
# usage.completion_tokens on /v1/completions), never guessed from text.
import http.client
import json
import random
import threading
import time

LOOPBACK = "127.0.0.1"
_DECODER = json.JSONDecoder()
_META = b'"meta_info":'
_print_lock = threading.Lock()


def _say(**fields):
    with _print_lock:
        progress(**fields)


# -- the server ------------------------------------------------------------------------------
def _get(port, path, timeout=10):
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def check_health(port):
    """The server must answer /health with 200 before anything is measured."""
    try:
        status, body = _get(port, "/health")
    except ConnectionRefusedError:
        raise UserError(f"no server on {LOOPBACK}:{port} (connection refused); start it or pass --port") from None
    except TimeoutError:
        raise UserError(f"server on {LOOPBACK}:{port} did not answer /health within 10 s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise UserError(f"server on {LOOPBACK}:{port} is unreachable: {exc or type(exc).__name__}") from None
    if status != 200:
        detail = body.decode(errors="replace").strip().splitlines()[:1]
        why = f" ({detail[0][:120]})" if detail else ""
        raise UserError(f"server on {LOOPBACK}:{port} is not healthy: /health answered HTTP {status}{why}")


def server_info(port):
    """The effective launch arguments (SGLang /server_info, older /get_server_info); None for vLLM."""
    for path in ("/server_info", "/get_server_info"):
        try:
            status, body = _get(port, path)
            if status == 200:
                info = json.loads(body)
                if isinstance(info, dict):
                    info.pop("internal_states", None)  # live scheduler state, not launch arguments
                    return info
        except (OSError, ValueError, http.client.HTTPException):
            pass
    return None


def served_model(port, info):
    if info:
        for key in ("served_model_name", "model_path"):
            if info.get(key):
                return info[key]
    try:
        status, body = _get(port, "/v1/models")
        if status == 200:
            data = json.loads(body).get("data") or []
            if data:
                return data[0].get("id")
    except (OSError, ValueError, http.client.HTTPException):
        pass
    return "default"


# -- what is applied -----------------------------------------------------------------------------
def applied_patches(root):
    """Patches from the ledger, each file's current hash checked against the hash recorded after applying."""
    if not root:
        return []
    path = _os.path.join(sglops_dir(root, create=False), "applied.json")
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
            full = rel if _os.path.isabs(rel) else _os.path.join(root, rel)
            now = sha256_file(full)
            if isinstance(hashes, dict) and hashes.get("after") and now != hashes.get("after"):
                intact = False
        entry["intact"] = intact
        out.append(entry)
    return out


# -- one request -----------------------------------------------------------------------------------
def make_body(api, model, ids, out_len):
    if api == "sglang":
        return "/generate", {
            "input_ids": ids, "stream": True,
            "sampling_params": {"max_new_tokens": out_len, "temperature": 0, "ignore_eos": True},
        }
    return "/v1/completions", {
        "model": model, "prompt": ids, "max_tokens": out_len, "temperature": 0, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def _native_meta(data):
    """meta_info from a /generate chunk without parsing the cumulative text (O(n^2) otherwise)."""
    at = data.rfind(_META)
    if at >= 0:
        try:
            start = at + len(_META)
            while data[start:start + 1] in (b" ", b"\t"):
                start += 1
            return _DECODER.raw_decode(data[start:].decode())[0], None
        except ValueError:
            pass
    obj = json.loads(data)
    return obj.get("meta_info"), obj


def _spread(chunk_times, total):
    """Per-token ITL when chunks carry no token counts: gaps spread over the tokens evenly."""
    gaps = [b - a for a, b in zip(chunk_times, chunk_times[1:], strict=False)]
    if not gaps or total < 2:
        return []
    per_gap = (total - 1) / len(gaps)
    itl, done = [], 0
    for i, gap in enumerate(gaps):
        upto = round((i + 1) * per_gap)
        n = upto - done
        if n > 0:
            itl.extend([gap / n] * n)
            done = upto
    return itl


def _lines(resp):
    """(arrival time, line) for each line of the stream; lines that arrived together share a time.

    read1() hands over whatever the socket has (one HTTP chunk at most), far cheaper than readline().
    """
    buf = b""
    while True:
        block = resp.read1(1 << 16)
        now = time.perf_counter()
        if not block:
            if buf:
                yield now, buf
            return
        buf = buf + block if buf else block
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            yield now, buf[start:end]
            start = end + 1
        buf = buf[start:]


def one_request(port, api, model, ids, out_len, timeout):
    """Stream one request; every timestamp is taken as its line arrives."""
    path, body = make_body(api, model, ids, out_len)
    payload = json.dumps(body).encode()
    rec = {"outcome": "ok", "error": None, "ttft_s": None, "e2e_s": None, "tokens": 0, "prompt_tokens": None,
           "itl_s": [], "itl_basis": "per_token", "chunks": 0, "first_tokens": None, "server_e2e_s": None, "finish": None}
    cpu0 = time.thread_time()
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    st = time.perf_counter()
    last_t, last_n, done = st, 0, False
    chunk_times, counted, got_usage = [], True, api == "sglang"
    try:
        conn.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            text = resp.read().decode(errors="replace").strip().replace("\n", " ")
            rec.update(outcome="http_error", error=f"HTTP {resp.status}: {text[:200]}")
            return rec
        now = st
        for now, line in _lines(resp):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            if api == "sglang":
                meta, obj = _native_meta(data)
                if meta is None:
                    err = (obj or {}).get("error") if isinstance(obj, dict) else None
                    rec.update(outcome="error", error=f"server error: {str(err or 'chunk without meta_info')[:200]}")
                    break
                n = meta.get("completion_tokens")
                if rec["prompt_tokens"] is None:
                    rec["prompt_tokens"] = meta.get("prompt_tokens")
                if meta.get("e2e_latency") is not None:
                    rec["server_e2e_s"] = meta["e2e_latency"]
                if meta.get("finish_reason"):
                    rec["finish"] = meta["finish_reason"]
            else:
                obj = json.loads(data)
                if obj.get("error") or obj.get("object") == "error":
                    rec.update(outcome="error", error=f"server error: {str(obj.get('error') or obj)[:200]}")
                    break
                usage = obj.get("usage") or {}
                choices = obj.get("choices") or []
                n = usage.get("completion_tokens")
                if usage.get("prompt_tokens") is not None:
                    rec["prompt_tokens"] = usage["prompt_tokens"]
                if not choices:  # the final usage chunk (or a keep-alive without either)
                    if n is not None:
                        last_n = max(last_n, n) if counted else n
                        got_usage = True
                    continue
                if choices[0].get("finish_reason"):
                    rec["finish"] = choices[0]["finish_reason"]
                if n is None:  # no continuous usage: a text chunk, its count unknown until the usage chunk
                    counted = False
                    if choices[0].get("text"):
                        rec["chunks"] += 1
                        chunk_times.append(now)
                        if rec["ttft_s"] is None:
                            rec["ttft_s"] = now - st
                    continue
                got_usage = True
            if n is None:
                rec.update(outcome="error", error="server sent no completion_tokens; cannot count tokens")
                break
            if n > last_n:
                rec["chunks"] += 1
                chunk_times.append(now)
                if rec["ttft_s"] is None:
                    rec["ttft_s"] = now - st
                    rec["first_tokens"] = n
                else:
                    per = (now - last_t) / (n - last_n)
                    rec["itl_s"].extend([per] * (n - last_n))
                last_t, last_n = now, n
        rec["e2e_s"] = now - st
    except TimeoutError:
        rec.update(outcome="timeout", error=f"no data for {timeout:g} s")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if rec["chunks"]:
            rec.update(outcome="dropped", error=f"stream dropped after {last_n} tokens ({type(exc).__name__})")
        else:
            rec.update(outcome="error", error=f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()
        rec["tokens"] = last_n
        rec["cpu_s"] = time.thread_time() - cpu0
    if rec["outcome"] == "ok" and not got_usage and rec["chunks"]:
        rec.update(outcome="error", error="server sent no usage (stream_options.include_usage ignored?); "
                   "cannot count tokens")
    if not counted and rec["outcome"] == "ok":
        rec["itl_basis"] = "per_token" if rec["chunks"] == last_n else "chunks_spread"
        rec["itl_s"] = _spread(chunk_times, last_n)
        rec["first_tokens"] = last_n - len(rec["itl_s"]) if last_n else None
    if rec["outcome"] == "ok":
        finish = rec["finish"]
        kind = finish.get("type") if isinstance(finish, dict) else finish
        if not done and not finish:
            rec.update(outcome="dropped", error=f"stream ended after {last_n} tokens without finishing")
        elif kind == "abort":
            rec.update(outcome="error", error=f"server aborted: {str(finish)[:200]}")
        elif last_n < out_len:
            rec.update(outcome="short", error=f"{last_n} of {out_len} tokens (finish: {kind})")
    rec["itl_s"] = [round(x, 7) for x in rec["itl_s"]]
    return rec


# -- a batch of requests at a concurrency -------------------------------------------------------------
class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.done = self.failed = 0


def run_batch(port, api, model, prompts, out_len, concurrency, timeout, counter):
    """Send the prompts with `concurrency` streams in flight; returns (records, wall seconds)."""
    records = [None] * len(prompts)
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(prompts):
                return
            t0 = time.perf_counter()
            rec = one_request(port, api, model, prompts[i], out_len, timeout)
            rec["start_s"] = t0
            records[i] = rec
            with counter.lock:
                counter.done += 1
                counter.failed += rec["outcome"] != "ok"

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(concurrency, len(prompts)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    for rec in records:
        rec["start_s"] = round(rec["start_s"] - t0, 6)
    return records, wall


def prompt_ids(seed, n, low, high):
    """Distinct random token ids per request, so the prefix cache cannot serve the prompt."""
    rng = random.Random(seed)
    return [rng.randrange(low, high) for _ in range(n)]


def main(args):
    tree, tree_error = try_find_sglang(args.get("sglang_root"))
    port, port_from = server_port(tree["root"] if tree else None, args.get("port"))
    api = args.get("api") or "sglang"
    if api not in ("sglang", "openai"):
        raise UserError(f"unknown api {api!r} (sglang or openai)")
    levels = [int(c) for c in args.get("concurrency") or [1]]
    runs, in_len, out_len = int(args.get("runs", 5)), int(args.get("input_len", 128)), int(args.get("output_len", 256))
    per_run = args.get("requests")  # per repeat and level; default one per stream
    warmup = int(args.get("warmup", 1))
    timeout = float(args.get("request_timeout", 120))
    low, high = args.get("token_range") or [1000, 30000]

    check_health(port)
    info = server_info(port)
    model = args.get("model") or served_model(port, info)
    patches = applied_patches(tree["root"] if tree else None)

    plan = [(rep, c) for rep in range(runs) for c in levels]  # repeats interleaved across levels
    sizes = {c: max(1, int(per_run or c)) for c in levels}
    total_req = sum(sizes[c] for _, c in plan)
    counter = Counter()
    stop = threading.Event()
    state = {"phase": "warm-up"}

    def reporter():
        while not stop.wait(0.5):
            _say(phase=state["phase"], done=counter.done, total=total_req, failed=counter.failed)

    threading.Thread(target=reporter, daemon=True).start()
    seed = int(args.get("seed", 0))
    warm = []
    try:
        for c in levels:
            for w in range(warmup):
                prompts = [prompt_ids(-(seed * 7919 + c * 131 + w * 17 + i + 1), in_len, low, high) for i in range(c)]
                recs, _ = run_batch(port, api, model, prompts, min(out_len, 32), c, timeout, Counter())
                for rec in recs:
                    if rec["outcome"] in ("http_error", "error", "timeout") and rec["tokens"] == 0:
                        raise UserError(f"warm-up request to {LOOPBACK}:{port} failed: {rec['error']}")
                warm.extend({"concurrency": c, "outcome": r["outcome"], "error": r["error"]} for r in recs)
        state["phase"] = "measuring"
        _say(phase="measuring", done=0, total=total_req, failed=0)
        repeats = []
        cpu0 = time.process_time()
        tokens = 0
        for k, (rep, c) in enumerate(plan):
            prompts = [prompt_ids(seed * 1000003 + k * 1009 + i, in_len, low, high) for i in range(sizes[c])]
            started = time.time()
            recs, wall = run_batch(port, api, model, prompts, out_len, c, timeout, counter)
            tokens += sum(r["tokens"] for r in recs)
            repeats.append({"repeat": rep, "concurrency": c, "wall_s": wall, "started": started, "requests": recs})
            _say(phase="measuring", done=counter.done, total=total_req, failed=counter.failed)
        cpu = time.process_time() - cpu0
    finally:
        stop.set()
    return {
        "api": api, "port": port, "port_from": port_from, "model": model, "input_len": in_len, "output_len": out_len,
        "runs": runs, "concurrency": levels, "requests_per_run": sizes, "warmup": warm,
        "server_info": info, "sglang": tree, "sglang_error": tree_error, "patches": patches,
        "repeats": repeats, "client_cpu_s": cpu, "client_tokens": tokens,
    }
