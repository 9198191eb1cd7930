"""Client CPU per /generate chunk with logprobs on: the bench client's reading vs decoding the chunk whole.

With return_logprob, SGLang's /generate chunks carry the cumulative text, output_ids and every logprob so far
(`[logprob, id, null]` per token), so a chunk at token n is O(n) bytes. The client reads only the numbers it
needs from a streaming chunk (bench_client._native_meta) and decodes the final chunk once; this compares that
with json.loads of the same chunk, per chunk and per request, in one run. Chunks are built in SGLang 0.5.23's
layout (the key order its tokenizer manager writes, as the real CPU server sent them).

    python3 benchmarks/bench_chunk_parse.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.host import bench_client  # noqa: E402


def host_client() -> dict:
    """The host client module as a host runs it (the module sent there)."""
    return vars(bench_client)


def chunk(n: int, final: bool = False) -> bytes:
    meta = {
        "id": "8b4100c1d18d48dca3a4ef03366a8459",
        "finish_reason": {"type": "length", "length": n} if final else None,
        "prompt_tokens": 128,
        "weight_version": "default",
        "num_retractions": 0,
        "input_token_logprobs": [],
        "output_token_logprobs": [[-6.374382019042969, 805, None]] * n,
        "output_token_logprobs_length": n,
        "reasoning_tokens": 0,
        "completion_tokens": n,
        "cached_tokens": 0,
        "cached_tokens_details": None,
        "dp_rank": None,
        "response_sent_to_client_ts": 1796245032.8021667,
    }
    return json.dumps(
        {"text": " date" * n, "output_ids": [805] * n, "meta_info": meta}, separators=(",", ":")
    ).encode()


def per_chunk_us(fn, data: bytes, repeats: int, batches: int = 7) -> float:
    """Median over batches of the thread CPU per call (a shared machine: wall time would count other jobs)."""
    out = []
    for _ in range(batches):
        t0 = time.thread_time()
        for _ in range(repeats):
            fn(data)
        out.append((time.thread_time() - t0) / repeats * 1e6)
    return statistics.median(out)


def main() -> None:
    client = host_client()
    native_meta = client["_native_meta"]
    out = {}
    for n in (256, 1024, 4096):
        data = chunk(n)
        assert native_meta(data)[0]["completion_tokens"] == n
        reps = max(20, 100_000 // n)
        fast, full = per_chunk_us(native_meta, data, reps), per_chunk_us(json.loads, data, max(5, reps // 20))
        # a request streams n chunks of growing size: per token, the mean cost over its positions
        # (sampled at n/8, 3n/8, 5n/8, 7n/8)
        at = [chunk(max(1, n * k // 8)) for k in (1, 3, 5, 7)]
        req_fast = statistics.mean(per_chunk_us(native_meta, c, reps, 3) for c in at)
        req_full = statistics.mean(per_chunk_us(json.loads, c, max(5, reps // 20), 3) for c in at)
        out[n] = {
            "chunk_bytes": len(data),
            "client_us_per_chunk": round(fast, 1),
            "json_loads_us_per_chunk": round(full, 1),
            "ratio": round(full / fast, 1),
            "client_us_per_token_over_request": round(req_fast, 1),
            "json_loads_us_per_token_over_request": round(req_full, 1),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
