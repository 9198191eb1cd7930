# The OpenAI chat endpoint (`--api openai-chat`, /v1/chat/completions): a request's body from chat messages,
# the text of a drawn prompt (the server's /detokenize: a chat message is text, sglops draws ids), and the
# fields of a streamed chat chunk. The chat API gives no exact ids to send: a conversation is text, which the
# server renders through its chat template and tokenizes itself. Standard library only.
import json
import time

from . import _fetch
from ._common import UserError

CHAT = "openai-chat"
PATH = "/v1/chat/completions"


def messages_of(prompt):
    """A prompt as chat messages: a text is one user message; messages stay as they are. Ids have no
    chat form (the caller turns them into text first: detokenize)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        return prompt
    raise UserError("--api openai-chat sends chat messages: this prompt is token ids (no text to send)")


def chat_body(model, prompt, out_len, logprobs):
    """(path, body) of one streamed chat completion: temperature 0, ignore_eos, usage in every chunk (the
    server's token counts and, where reported, its cached prompt tokens), the output ids and the cache's
    breakdown where SGLang gives them (`sglext`, the stream's last chunk; other servers ignore the fields)."""
    body = {
        "model": model,
        "messages": messages_of(prompt),
        "max_completion_tokens": out_len,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_output_ids_in_sglext": True,
        "return_cached_tokens_details": True,
    }
    if logprobs:
        body.update(logprobs=True, top_logprobs=0)
    return PATH, body


def chat_outputs(choice, rec):
    """The answer's text and chosen-token logprobs (and their text) of one chat chunk's choice."""
    delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
    content = delta.get("content")
    if isinstance(content, str) and content:
        rec["text"] = (rec["text"] or "") + content
    lp = choice.get("logprobs")
    entries = lp.get("content") if isinstance(lp, dict) else None
    if isinstance(entries, list):
        rec["logprobs"] = (rec["logprobs"] or []) + [
            e.get("logprob") if isinstance(e, dict) else None for e in entries
        ]
        rec["tokens_text"] = (rec["tokens_text"] or []) + [
            e.get("token") if isinstance(e, dict) else None for e in entries
        ]
    return bool(content)


def sglext(obj, rec):
    """SGLang's extension chunk: the output ids (`output_ids`, one list per choice) and the prompt tokens its
    caches served (`cached_tokens_details`: device + host + storage), where sent. A usage's own
    `prompt_tokens_details.cached_tokens` (--enable-cache-report) counts first."""
    ext = obj.get("sglext")
    if not isinstance(ext, dict):
        return
    ids = ext.get("output_ids")
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        rec["ids"] = [int(x) for x in ids[0]]
    details = ext.get("cached_tokens_details")
    if isinstance(details, dict) and rec["cached_tokens"] is None:
        parts = [details.get(k) for k in ("device", "host", "storage")]
        if all(p is None or type(p) is int for p in parts) and any(p is not None for p in parts):
            rec["cached_tokens"] = sum(p or 0 for p in parts)


def detokenize(port, model, ids, headers=None, timeout=30.0):
    """The text of `ids` as the server's own tokenizer decodes them (/detokenize: SGLang answers `text`, vLLM
    `prompt`); a server without it ends the run with one line."""
    payload = json.dumps({"model": model, "tokens": list(ids)}).encode()
    deadline = time.perf_counter() + timeout
    sock, status, head, rest = _fetch.open_post(port, "/detokenize", payload, timeout, deadline, headers)
    try:
        got = b"".join(block for _, block in _fetch.body(sock, head, rest, deadline, timeout))
    finally:
        sock.close()
    obj = json.loads(got) if status == 200 else None
    text = (obj.get("text") if "text" in obj else obj.get("prompt")) if isinstance(obj, dict) else None
    if not isinstance(text, str):
        raise UserError(
            f"--api openai-chat: the server's /detokenize answered HTTP {status} "
            f"({got[:120].decode(errors='replace')!r}): sglops cannot make the chat text of its prompt ids"
        )
    return text
