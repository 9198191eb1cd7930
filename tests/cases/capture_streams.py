"""Record the raw bytes of real SGLang streams for
tests/cases/stream_chunks.yaml (run by hand, loopback only).

Why: the chunk-parsing cases must be what a real server sends, byte for byte, not a hand-written guess. Start
the sandbox's real CPU server (playbooks/profiles/sandbox-sglang-cpu.yaml, or its argv by hand) and run
`python3 tests/cases/capture_streams.py PORT > /tmp/streams.json`; the HTTP body of each stream is kept
de-chunked (what `resp.read1()` hands the bench client), split where the socket delivered it.
"""

from __future__ import annotations

import http.client
import json
import sys

REQUESTS = {
    "sglang": (
        "/generate",
        {
            "input_ids": [11, 22, 33, 44],
            "stream": True,
            "sampling_params": {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True},
        },
    ),
    "openai": (
        "/v1/completions",
        {
            "model": "default",
            "prompt": [11, 22, 33, 44],
            "max_tokens": 3,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ),
    "openai_no_usage": (
        "/v1/completions",
        {
            "model": "default",
            "prompt": [11, 22, 33, 44],
            "max_tokens": 3,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        },
    ),
    "sglang_error": (
        "/generate",
        {"input_ids": [11, 22], "stream": True, "sampling_params": {"max_new_tokens": 2, "temperature": -3}},
    ),
    "openai_error": (
        "/v1/completions",
        {"model": "default", "prompt": [11, 22], "max_tokens": 2, "temperature": -3, "stream": True},
    ),
}


def capture(port: int, path: str, body: dict) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    pieces = []
    while block := resp.read1(1 << 16):
        pieces.append(block.decode())
    conn.close()
    return {"status": resp.status, "pieces": pieces}


def main() -> None:
    port = int(sys.argv[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/v1/models")
    model = json.loads(conn.getresponse().read())["data"][0]["id"]
    out = {}
    for name, (path, body) in REQUESTS.items():
        out[name] = capture(port, path, {**body, "model": model} if "model" in body else body)
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
