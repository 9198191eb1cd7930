"""A small HTTP server on loopback that answers the way a broken or hostile server (or a proxy before one)
does: streams without end, keep-alive comments forever, a byte at a time, 30 MB documents, JSON nested 50,000
deep, wrong types, integers past 64 bits, garbage instead of HTTP. Tests point sglops' host scripts at it (the
bench client, server-status, the restart's /health wait) and check that each read ends in time with one line.

    with HostileServer("endless") as srv:   # srv.port
        ...

Every behaviour answers /health 200 and a plausible /server_info unless it is the one being broken, so a
client gets past its checks to the read under test. Standard library only; threads end when the client hangs
up.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable

VOCAB = 32000
INFO = {
    "model_path": "/models/tiny",
    "served_model_name": "tiny",
    "vocab_size": VOCAB,
    "version": "0.5.23",
    "tp_size": 1,
}


def _head(
    status: int = 200,
    ctype: str = "application/json",
    length: int | None = None,
    chunked: bool = False,
    extra: str = "",
) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {ctype}"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _json(sock: socket.socket, doc: object, status: int = 200) -> None:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    sock.sendall(_head(status, length=len(body)) + body)


def _event(meta: dict, **more: object) -> bytes:
    return (
        b"data: " + json.dumps({"text": "x", "output_ids": [1], "meta_info": meta, **more}).encode() + b"\n\n"
    )


def _finished(n: int = 4, **meta: object) -> bytes:
    return _event(
        {
            "completion_tokens": n,
            "prompt_tokens": 4,
            "finish_reason": {"type": "length"},
            "e2e_latency": 0.01,
            **meta,
        }
    )


def _stream(sock: socket.socket, events: list[bytes], done: bool = True) -> None:
    sock.sendall(_head(chunked=True, ctype="text/event-stream"))
    for e in events:
        sock.sendall(_chunk(e))
    if done:
        sock.sendall(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


def _forever(sock: socket.socket, piece: Callable[[int], bytes], every: float) -> None:
    i = 0
    while True:
        sock.sendall(piece(i))
        i += 1
        time.sleep(every)


# -- behaviours: (method, path) -> what the server does;
# None falls back to a sane answer ---------------------
def _endless_tokens(sock, path):
    if path == "/generate":
        sock.sendall(_head(chunked=True, ctype="text/event-stream"))
        _forever(sock, lambda i: _chunk(_event({"completion_tokens": i + 1, "finish_reason": None})), 0.01)
    return None


def _keepalive(sock, path):
    if path == "/generate":
        sock.sendall(_head(chunked=True, ctype="text/event-stream"))
        _forever(sock, lambda i: _chunk(b": keep-alive\n\n"), 0.2)
    return None


def _byte_trickle(sock, path):
    if path == "/generate":
        sock.sendall(_head(chunked=True, ctype="text/event-stream") + _chunk(_finished()[:1]))
        _forever(sock, lambda i: _chunk(b"x"), 0.3)
    return None


def _health_trickle(sock, path):
    if path == "/health":
        _forever(sock, lambda i: b"HTTP/1.1 200 OK\r\n"[i : i + 1] if i < 17 else b"X", 0.3)
    return None


def _info_trickle(sock, path):
    if path in ("/server_info", "/get_server_info"):
        sock.sendall(_head(length=1 << 20))
        _forever(sock, lambda i: b" ", 0.3)
    return None


def _metrics_endless(sock, path):
    if path == "/metrics":
        sock.sendall(_head(ctype="text/plain", chunked=True))
        _forever(sock, lambda i: _chunk(b"# HELP x\n"), 0.05)
    return None


def _huge_info(sock, path):
    if path in ("/server_info", "/get_server_info"):
        big = "a" * (30 << 20)
        _json(sock, {**INFO, "chat_template": big})
        return True
    return None


def _deep_info(sock, path):
    if path in ("/server_info", "/get_server_info", "/model_info"):
        _json(sock, b"[" * 50000 + b"]" * 50000)
        return True
    return None


def _list_info(sock, path):
    if path in ("/server_info", "/get_server_info"):
        _json(sock, ["tp_size", 1])
        return True
    return None


def _string_info(sock, path):
    if path in ("/server_info", "/get_server_info"):
        _json(sock, "ok")
        return True
    return None


def _wide_info(sock, path):
    if path in ("/server_info", "/get_server_info", "/model_info"):
        _json(
            sock,
            b'{"model_path": "/models/tiny", "vocab_size": 1180591620717411303424, "max_total_num_tokens": '
            b"1180591620717411303424}",
        )
        return True
    return None


def _number_path(sock, path):
    if path in ("/server_info", "/get_server_info", "/model_info"):
        _json(sock, {**INFO, "model_path": 5, "served_model_name": ["a"], "tokenizer_path": {"x": 1}})
        return True
    return None


def _wide_counts(sock, path):
    if path == "/generate":
        _stream(
            sock,
            [
                b'data: {"text": "x", "output_ids": [1], "meta_info": {"completion_tokens": '
                b'1180591620717411303424, "prompt_tokens": 1180591620717411303424, "finish_reason": '
                b'{"type": "length"}, "e2e_latency": 0.01}}\n\n'
            ],
        )
        return True
    return None


def _string_latency(sock, path):
    if path == "/generate":
        _stream(sock, [_finished(e2e_latency="fast", cached_tokens="many", decode_throughput=[1])])
        return True
    return None


def _meta_not_a_map(sock, path):
    if path == "/generate":
        _stream(sock, [b'data: {"text": "x", "meta_info": 7}\n\n'])
        return True
    return None


def _garbage(sock, path):
    if path == "/generate":
        sock.sendall(b"\x00\xffNOT HTTP AT ALL\r\n\r\n" * 3)
        return True
    return None


def _bad_status(sock, path):
    if path == "/generate":
        sock.sendall(b"HTTP/1.1 2000000000000000000000 OK\r\nContent-Length: 2\r\n\r\n{}")
        return True
    return None


def _endless_error(sock, path):
    if path == "/generate":
        sock.sendall(_head(500, ctype="text/plain"))
        _forever(sock, lambda i: b"error " * 1000, 0.01)
    return None


def _deep_chunk(sock, path):
    if path == "/generate":
        _stream(sock, [b"data: " + b"[" * 50000 + b"]" * 50000 + b"\n\n"])
        return True
    return None


def _unauthorized(sock, path):
    if path == "/generate":
        _json(sock, {"error": "Unauthorized"}, status=401)
        return True
    return None


BEHAVIOURS: dict[str, Callable] = {
    "endless-tokens": _endless_tokens,
    "keep-alive-forever": _keepalive,
    "byte-trickle": _byte_trickle,
    "health-trickle": _health_trickle,
    "info-trickle": _info_trickle,
    "metrics-endless": _metrics_endless,
    "huge-info": _huge_info,
    "deep-info": _deep_info,
    "list-info": _list_info,
    "string-info": _string_info,
    "wide-info": _wide_info,
    "number-model-path": _number_path,
    "wide-counts": _wide_counts,
    "string-latency": _string_latency,
    "meta-not-a-map": _meta_not_a_map,
    "garbage": _garbage,
    "bad-status": _bad_status,
    "endless-error": _endless_error,
    "deep-chunk": _deep_chunk,
    "unauthorized": _unauthorized,
}


def _sane(sock: socket.socket, path: str) -> None:
    if path == "/health":
        sock.sendall(_head(length=0))
    elif path in ("/server_info", "/get_server_info", "/model_info"):
        _json(sock, INFO)
    elif path == "/metrics":
        body = b"sglang:num_running_reqs 0\n"
        sock.sendall(_head(ctype="text/plain", length=len(body)) + body)
    elif path == "/generate":
        _stream(sock, [_finished()])
    else:
        _json(sock, {"error": "not found"}, status=404)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock = self.request
        buf = b""
        try:
            while b"\r\n\r\n" not in buf:
                got = sock.recv(65536)
                if not got:
                    return
                buf += got
            head, _, rest = buf.partition(b"\r\n\r\n")
            first = head.split(b"\r\n")[0].split()
            path = first[1].decode() if len(first) > 1 else "/"
            length = next(
                (
                    int(ln.split(b":")[1])
                    for ln in head.split(b"\r\n")
                    if ln.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(rest) < length:
                got = sock.recv(65536)
                if not got:
                    return
                rest += got
            self.server.seen.append((path, head))  # type: ignore[attr-defined]
            if not BEHAVIOURS[self.server.behaviour](sock, path):  # type: ignore[attr-defined]
                _sane(sock, path)
        except OSError:
            return


class HostileServer:
    """One behaviour on 127.0.0.1:port (a fresh port), served on threads until the block ends."""

    def __init__(self, behaviour: str) -> None:
        assert behaviour in BEHAVIOURS, behaviour
        self.behaviour = behaviour

    def __enter__(self) -> HostileServer:
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.behaviour = self.behaviour  # type: ignore[attr-defined]
        self.server.seen = []  # type: ignore[attr-defined]
        self.port = self.server.server_address[1]
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    @property
    def seen(self) -> list[tuple[str, bytes]]:
        return self.server.seen  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
