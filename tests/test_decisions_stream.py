"""Stream-chunk parsing of the bench client, both APIs, from real SGLang 0.5.23 streams re-chunked at awkward
places (cases: tests/cases/stream_chunks.yaml).

The host script's own `one_request` runs here, in the test process, against a loopback HTTP server that
replays the recorded bytes as HTTP chunks split where each case says (inside a JSON key, between the two
newlines of an event, one byte at a time) or cuts the connection; the real client code reads them with
http.client as on a host.
"""

from __future__ import annotations

import http.server
import threading

import pytest

from sglops.host import _bench_request
from tests.cases import cases, document

STREAMS = document("stream_chunks")["streams"]
PATHS = {"sglang": "/generate", "openai": "/v1/completions"}


def split(body: bytes, how) -> list[bytes]:
    """The body as the HTTP chunks a case asks for."""
    if how == "as_sent":
        # the caller sends the recorded pieces
        return []
    if "every" in how:
        n = how["every"]
        return [body[i : i + n] for i in range(0, len(body), n)]
    cuts = sorted({i for text in how["at"] for i in _all(body, text.encode())} - {0})
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


def _all(body: bytes, text: bytes) -> list[int]:
    found, at = [], body.find(text)
    assert at >= 0, f"split point {text!r} is not in the stream"
    while at >= 0:
        found.append(at)
        at = body.find(text, at + 1)
    return found


class Replay(http.server.BaseHTTPRequestHandler):
    """Answers one POST with the case's status and chunks; closes the connection where the case cuts it."""

    protocol_version = "HTTP/1.1"
    case: dict = {}
    seen: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append(self.path)
        case = self.case
        stream = STREAMS[case["stream"]]
        pieces = [p.encode() for p in stream["pieces"]]
        body = b"".join(pieces)
        if stream["status"] != 200:
            self.send_response(stream["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        chunks = pieces if case["split"] == "as_sent" else split(body, case["split"])
        cut = body.find(case["cut_at"].encode()) if case.get("cut_at") else None
        assert cut is None or cut > 0, f"cut point {case.get('cut_at')!r} is not in the stream"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        for chunk in chunks:
            if cut is not None and sent + len(chunk) > cut:
                chunk = chunk[: cut - sent]
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
            sent += len(chunk)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args) -> None:
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # a client that stopped reading after an error chunk resets the connection: expected here
        pass


@pytest.fixture(scope="module")
def server():
    srv = QuietServer(("127.0.0.1", 0), Replay)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("case", cases("stream_chunks"))
def test_stream_chunks(case, server):
    Replay.case, Replay.seen = case, []
    rec = _bench_request.one_request(server, case["api"], "m", [11, 22, 33, 44], case.get("out_len", 3), 10)
    assert Replay.seen == [PATHS[case["api"]]]
    want = case["expect"]
    got = {k: rec["chunk_n"] if k == "chunk_n" else rec[k] for k in want if k != "error"}
    assert got == {k: v for k, v in want.items() if k != "error"}, rec
    if "error" in want:
        assert want["error"] in (rec["error"] or ""), rec
    else:
        assert rec["error"] is None if rec["outcome"] == "ok" else rec["error"]
    assert len(rec["chunk_t"]) == len(rec["chunk_n"]) and rec["chunk_t"] == sorted(rec["chunk_t"])
