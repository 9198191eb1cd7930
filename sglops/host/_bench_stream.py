# Stream parsing: the `data:` events of one streamed answer (/generate, /v1/completions or the chat endpoint)
# into the request's record: the (arrival, cumulative count) timeline, the outputs, the finish and the
# outcome. No I/O here.
import hashlib
import json
import re

from ._bench_chat import chat_outputs, sglext
from ._server_info import MAX_COUNT, count_or_none, seconds_or_none

_META = b'"meta_info":'
_NUMBER = re.compile(rb"\s*(null|-?[0-9][0-9.eE+-]*)")
_FINISH_KEY = b'"finish_reason":'
_KEYS = ("completion_tokens", "cached_tokens", "e2e_latency")
# the numbers a streaming /generate chunk is read for, as bytes keys
_META_KEYS = {
    want: tuple((key, b'"%s":' % key.encode()) for key in _KEYS + (("prompt_tokens",) if want else ()))
    for want in (False, True)
}


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
    # after the text and ids (shorter than the logprobs that follow it)
    at = data.find(_META)
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
    # [logprob, token id, text or null] per token
    if lps is not None:
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
    """sha256 over the comma-joined ids, 16 hex digits
    (sglops.bench.identity.ids_hash: the same on the laptop)."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def prompt_hash(prompt):
    """A prompt's key for output identity: ids_hash of its ids, or of a text prompt's UTF-8 (prefixed, so a
    text can never share a key with ids)."""
    if isinstance(prompt, str):
        return "t" + hashlib.sha256(prompt.encode()).hexdigest()[:15]
    if prompt and isinstance(prompt[0], dict):
        # chat messages
        return "m" + hashlib.sha256(json.dumps(prompt, sort_keys=True).encode()).hexdigest()[:15]
    return ids_hash(prompt)


# a chunk that carries no count: ignore it / a text chunk of unknown count
_SKIP, _TEXT = object(), object()


def _native_chunk(data, rec, incremental):
    """The cumulative completion_tokens of one /generate chunk, noting its fields in rec; None: stop (rec says
    why)."""
    meta, obj = (
        _native_meta(data, rec["prompt_tokens"] is None) if not incremental else (None, json.loads(data))
    )
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
    # the server's own decode rate (--enable-metrics)
    if meta.get("decode_throughput") is not None:
        rec["server_decode_tok_s"] = meta["decode_throughput"]
    n = meta.get("completion_tokens")
    # checked inline: once per chunk
    if type(n) is int and 0 <= n <= MAX_COUNT:
        return n
    return _tokens_or_stop(n, rec)


def checked(rec):
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
        return {
            str(k)[:40]: v
            if v is None or isinstance(v, (bool, float)) or count_or_none(v) is not None
            else str(v)[:200]
            for k, v in list(value.items())[:8]
        }
    return str(value)[:200]


def _openai_chunk(data, rec, state):
    """The cumulative usage.completion_tokens of one /v1/completions or chat chunk, _SKIP, _TEXT (a text
    chunk without per-chunk usage) or None: stop (rec says why). The final usage chunk's count goes to
    state["final_n"]."""
    obj = json.loads(data)
    if not isinstance(obj, dict) or obj.get("error") or obj.get("object") == "error":
        rec.update(
            outcome="error",
            error=f"server error: {str(obj.get('error') if isinstance(obj, dict) else obj)[:200]}",
        )
        return None
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    choices = obj.get("choices") if isinstance(obj.get("choices"), list) else []
    n = usage.get("completion_tokens")
    if n is not None and count_or_none(n) is None:
        return _tokens_or_stop(n, rec)
    if usage.get("prompt_tokens") is not None:
        rec["prompt_tokens"] = usage["prompt_tokens"]
    # SGLang with --enable-cache-report, vLLM
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        rec["cached_tokens"] = details["cached_tokens"]
    # the final usage chunk, SGLang's chat `sglext` chunk (or a keep-alive)
    if not choices or not isinstance(choices[0], dict):
        if n is not None:
            state["final_n"] = n
        if obj.get("sglext") is not None:
            sglext(obj, rec)
        return _SKIP
    choice = choices[0]
    if "delta" in choice:
        texted = chat_outputs(choice, rec)
    else:
        _openai_outputs(choice, rec)
        texted = bool(choice.get("text"))
    if choice.get("finish_reason"):
        rec["finish"] = choice["finish_reason"]
    if n is None:
        return _TEXT if texted else _SKIP
    return n


def settle(rec, api, done, final_n, last_n, out_len):
    """The request's outcome once its stream ended: tokens counted, finished, of the length asked."""
    rec["tokens"] = final_n if final_n is not None else last_n
    if api != "sglang" and final_n is None and rec["outcome"] == "ok" and rec["chunk_t"]:
        rec.update(
            outcome="error",
            error="server sent no usage (stream_options.include_usage ignored?); cannot count tokens",
        )
    if rec["outcome"] != "ok":
        return
    finish = rec["finish"]
    kind = finish.get("type") if isinstance(finish, dict) else finish
    if not done and not finish:
        rec.update(outcome="dropped", error=f"stream ended after {rec['tokens']} tokens without finishing")
    elif kind == "abort":
        rec.update(outcome="error", error=f"server aborted: {str(finish)[:200]}")
    elif rec["tokens"] != out_len:
        rec.update(
            outcome="wrong_length",
            error=f"{rec['tokens']} tokens, {out_len} asked (finish: {kind}; ignore_eos not honoured?)",
        )


def error_text(blocks, most=4096):
    """The start of an error answer's body (a body that never ends is not read to its end)."""
    got = b""
    for _, block in blocks:
        got += block
        if len(got) >= most:
            break
    return got[:most].decode(errors="replace").strip()


def read_events(events, api, rec, incremental, st, state):
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
