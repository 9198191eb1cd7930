# Multi-turn sessions (`--dataset sessions:...`): each session's turns one after the other, each turn's prompt
# the session's whole history (every earlier prompt and the server's own answer ids) plus that turn's new ids,
# so the server's prefix cache meets what a chat service meets; `concurrency` sessions in flight at once.
# Standard library.
import threading
import time

from ._bench_request import counted_request, joined


def run_sessions(
    port, api, model, prompts, concurrency, timeout, counter, logprobs=True, incremental=False, deadline=None
):
    """Closed loop over sessions: each of `concurrency` workers takes the next session and sends its turns in
    order (after `think_ms` of the dataset between them). A turn that failed or brought no output ids ends its
    session (the next turn has no answer to carry). Records carry `session` and `turn`; returns (records in
    session-then-turn order, wall seconds)."""
    d = prompts.d
    sessions, turns, think = int(d["count"]), int(d["turns"]), float(d.get("think_ms") or 0) / 1000.0
    records = {}
    nxt = [0]
    lock = threading.Lock()

    def late():
        return deadline is not None and time.perf_counter() >= deadline

    def worker():
        while True:
            with lock:
                s = nxt[0]
                nxt[0] += 1
            if s >= sessions or late():
                return
            history = list(prompts.system())
            for t in range(turns):
                if late():
                    return
                ids, out_len = prompts.turn(s, t)
                ids = history + ids
                start = time.perf_counter()
                rec = counted_request(
                    port, api, model, (ids, out_len), timeout, counter, None, logprobs, incremental
                )
                rec.update(start_s=start, session=s, turn=t)
                records[s * turns + t] = rec
                if rec["outcome"] not in ("ok", "wrong_length") or not rec.get("ids"):
                    break
                history = ids + list(rec["ids"])
                if think and t + 1 < turns:
                    time.sleep(think)

    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(int(concurrency), sessions)))
    ]
    for t in threads:
        t.start()
    return joined(threads, records, t0)
