# Multi-turn sessions (`--dataset sessions:...`): each session's turns one after the other, each turn's prompt
# the session's whole history (every earlier prompt and the server's own answer) plus that turn's new part,
# so the server's prefix cache meets what a chat service meets; `concurrency` sessions in flight at once.
# On /generate and /v1/completions the history is ids (the answers' own ids carried exactly); on the chat
# endpoint it is messages: a system message, the user turns and the server's answers as assistant messages
# (their text: the chat API takes no ids). Standard library.
import threading
import time

from ._bench_chat import CHAT
from ._bench_request import counted_request, joined


def chat_texts(prompts, text_of):
    """(system text, [[turn text] per session]) of a chat session run: the dataset's own texts (`texts`,
    read from a file on the laptop) or the drawn ids in the server's decoding (`text_of`), made before the
    first turn is sent so no turn waits for them."""
    d = prompts.d
    sessions, turns = int(d["count"]), int(d["turns"])
    given = d.get("texts")
    if given:
        return given.get("system") or "", [list(given["sessions"][s][:turns]) for s in range(sessions)]
    system = prompts.system()
    return (
        text_of(system) if system else "",
        [[text_of(prompts.turn(s, t)[0]) for t in range(turns)] for s in range(sessions)],
    )


def run_sessions(
    port,
    api,
    model,
    prompts,
    concurrency,
    timeout,
    counter,
    logprobs=True,
    incremental=False,
    deadline=None,
    text_of=None,
):
    """Closed loop over sessions: each of `concurrency` workers takes the next session and sends its turns in
    order (after `think_ms` of the dataset between them). A turn that failed or brought no answer ends its
    session (the next turn has no answer to carry). Records carry `session` and `turn`; returns (records in
    session-then-turn order, wall seconds). `text_of(ids)`: the server's text of ids (the chat API only)."""
    d = prompts.d
    sessions, turns, think = int(d["count"]), int(d["turns"]), float(d.get("think_ms") or 0) / 1000.0
    chat = chat_texts(prompts, text_of) if api == CHAT else None
    records = {}
    nxt = [0]
    lock = threading.Lock()

    def late():
        return deadline is not None and time.perf_counter() >= deadline

    def first(s):
        if chat:
            return [{"role": "system", "content": chat[0]}] if chat[0] else []
        return list(prompts.system())

    def prompt(history, s, t):
        if chat:
            return history + [{"role": "user", "content": chat[1][s][t]}], prompts.turn_len(s, t)
        ids, out_len = prompts.turn(s, t)
        return history + ids, out_len

    def carried(sent, rec):
        """The next turn's history: what was sent and the server's answer (None: no answer to carry)."""
        if chat:
            if rec.get("text") is None:
                return None
            return sent + [{"role": "assistant", "content": rec["text"]}]
        return sent + list(rec["ids"]) if rec.get("ids") else None

    def worker():
        while True:
            with lock:
                s = nxt[0]
                nxt[0] += 1
            if s >= sessions or late():
                return
            history = first(s)
            for t in range(turns):
                if late():
                    return
                sent, out_len = prompt(history, s, t)
                start = time.perf_counter()
                rec = counted_request(
                    port, api, model, (sent, out_len), timeout, counter, None, logprobs, incremental
                )
                rec.update(start_s=start, session=s, turn=t)
                records[s * turns + t] = rec
                history = carried(sent, rec) if rec["outcome"] in ("ok", "wrong_length") else None
                if history is None:
                    break
                if think and t + 1 < turns:
                    time.sleep(think)

    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(int(concurrency), sessions)))
    ]
    for t in threads:
        t.start()
    return joined(threads, records, t0)
