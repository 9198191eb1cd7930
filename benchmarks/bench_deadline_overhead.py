"""What the per-request deadline costs the bench client on a normal run: client CPU per request, new vs a tree
without deadlines, in one process against one local streaming server, requests interleaved.

The server (loopback, in this process) streams N tokens per request as SGLang's /generate does (cumulative
meta_info, output_ids and logprobs in each chunk, then a finish and [DONE]), as fast as the client reads.

    git worktree add --detach /tmp/sglops-before a75f672
    python3 benchmarks/bench_deadline_overhead.py --before /tmp/sglops-before --requests 200 --output-len 256
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import socketserver
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.host import bench_client as new_client  # noqa: E402


def load_client(tree: Path, name: str):
    """bench_client of another tree, imported as package `name` (its relative imports from that tree)."""
    host = tree / "sglops" / "host"
    spec = importlib.util.spec_from_file_location(
        name, host / "__init__.py", submodule_search_locations=[str(host)]
    )
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[name] = pkg
    spec.loader.exec_module(pkg)
    return importlib.import_module(f"{name}.bench_client")


class _Stream(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock, buf = self.request, b""
        while b"\r\n\r\n" not in buf:
            buf += sock.recv(65536)
        head, _, rest = buf.partition(b"\r\n\r\n")
        length = int(
            next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
        )
        while len(rest) < length:
            rest += sock.recv(65536)
        n = json.loads(rest)["sampling_params"]["max_new_tokens"]
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        ids, lps = [], []
        for i in range(1, n + 1):
            ids.append(i % 1000)
            lps.append([-0.5, i % 1000, None])
            meta = {
                "prompt_tokens": 8,
                "completion_tokens": i,
                "cached_tokens": 0,
                "output_token_logprobs": lps,
                "finish_reason": {"type": "length"} if i == n else None,
                "e2e_latency": 0.01,
            }
            data = (
                b"data: "
                + json.dumps({"text": "x" * i, "output_ids": ids, "meta_info": meta}).encode()
                + b"\n\n"
            )
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
        done = b"data: [DONE]\n\n"
        sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="a tree without request deadlines")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--output-len", type=int, default=256)
    args = ap.parse_args()
    old_client = load_client(args.before, "before_host")
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Stream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    cpu = {"before": [], "after": []}
    wall = {"before": [], "after": []}
    for i in range(args.requests):
        for name, client in (("before", old_client), ("after", new_client))[:: 1 if i % 2 else -1]:
            t0 = time.perf_counter()
            rec = client.one_request(port, "sglang", "m", [1, 2, 3], args.output_len, 30.0)
            assert rec["outcome"] == "ok" and rec["tokens"] == args.output_len, rec["error"]
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(rec["cpu_s"])
    server.shutdown()
    med = {k: statistics.median(v) for k, v in cpu.items()}
    medw = {k: statistics.median(v) for k, v in wall.items()}
    print(
        json.dumps(
            {
                "requests": args.requests,
                "output_len": args.output_len,
                "client_cpu_ms_median": {k: round(v * 1e3, 3) for k, v in med.items()},
                "wall_ms_median": {k: round(v * 1e3, 3) for k, v in medw.items()},
                "cpu_ratio_after_over_before": round(med["after"] / med["before"], 4),
                "wall_ratio_after_over_before": round(medw["after"] / medw["before"], 4),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
