# HTTP to the host's own server, straight on a socket, every read bounded: a deadline for the whole answer
# (not only per recv: a server that sends one byte a second, or keep-alive comments forever, would otherwise
# hold a read open for good) and a cap on its size. Standard library only, Python 3.8.
import http.client
import socket
import time

LOOPBACK = "127.0.0.1"
RECV = 1 << 16
HEAD_MAX = 1 << 16
# /health, /metrics, /v1/models: far below this
ANSWER_MAX = 8 << 20
# /server_info: read whole (a chat template, a model config inside), then kept by its fields
INFO_MAX = 64 << 20


class TooLarge(ValueError):
    """An answer past the size cap."""


class Late(socket.timeout):
    """The deadline of the whole request passed (a socket.timeout: callers that catch one catch both)."""


def arm(sock, deadline, timeout=None):
    """Before each blocking step: the socket's timeout is what is left of the deadline (or `timeout`, the
    longest wait for any data, when that is shorter); Late once nothing is left."""
    left = deadline - time.perf_counter()
    if left <= 0:
        raise Late("deadline passed")
    want = left if timeout is None or timeout > left else timeout
    # most reads of a stream keep `timeout`: no call then
    if want != sock.gettimeout():
        sock.settimeout(want)


def recv(sock, deadline, timeout=None):
    """One read of at most RECV bytes, within the deadline (Late when it passed while waiting)."""
    arm(sock, deadline, timeout)
    try:
        return sock.recv(RECV)
    except socket.timeout:  # noqa: UP041 (python 3.8 on a host: socket.timeout is no TimeoutError)
        if time.perf_counter() >= deadline - 0.001:
            raise Late("deadline passed") from None
        raise


def open_post(port, path, payload, timeout, deadline, headers=None):
    """Connect, send one POST; returns (socket, status, lower-cased headers, body bytes already read)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        arm(sock, deadline, timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.connect((LOOPBACK, port))
        extra = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in (headers or {}).items())
        sock.sendall(
            b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nAccept-Encoding: identity\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
            % (path.encode(), LOOPBACK.encode(), port, len(payload), extra, payload)
        )
        status, head, rest = read_head(sock, deadline, timeout)
    except BaseException:
        sock.close()
        raise
    return sock, status, head, rest


def read_head(sock, deadline, timeout=None):
    """(status, headers, what followed them) of the response; the errors http.client would raise."""
    buf = b""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > HEAD_MAX:
            raise http.client.LineTooLong("response headers")
        block = recv(sock, deadline, timeout)
        if not block:
            if buf:
                raise http.client.IncompleteRead(buf)
            raise http.client.RemoteDisconnected("Remote end closed connection without response")
        buf += block
    lines = buf[:end].split(b"\r\n")
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise http.client.BadStatusLine(lines[0][:100].decode("latin-1"))
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(b":")
        headers[key.strip().lower()] = value.strip()
    return int(parts[1]), headers, buf[end + 4 :]


def body(sock, headers, rest, deadline, timeout=None):
    """(arrival time, body bytes) per read from the socket: chunked, Content-Length or to the end; what
    arrived together shares a time. A body cut short raises IncompleteRead (as http.client does)."""
    if headers.get(b"transfer-encoding", b"").lower().endswith(b"chunked"):
        return _dechunk(sock, rest, deadline, timeout)
    length = headers.get(b"content-length")
    try:
        size = int(length) if length is not None else None
    except ValueError:
        raise http.client.HTTPException("bad Content-Length") from None
    if size is not None and size < 0:
        raise http.client.HTTPException("bad Content-Length")
    return _plain(sock, rest, size, deadline, timeout)


def _plain(sock, buf, length, deadline, timeout):
    got = 0
    while True:
        if buf:
            if length is not None:
                buf = buf[: length - got]
            got += len(buf)
            yield time.perf_counter(), buf
        if length is not None and got >= length:
            return
        buf = recv(sock, deadline, timeout)
        if not buf:
            if length is not None:
                raise http.client.IncompleteRead(b"", length - got)
            return


def _dechunk(sock, buf, deadline, timeout):
    """The data of a chunked body as it arrives: each read's complete and partial chunks joined."""
    # data bytes of the current chunk still to come; its trailing CRLF still to drop
    need = skip = 0
    now = time.perf_counter()
    while True:
        out, at = [], 0
        while at < len(buf):
            if skip:
                taken = min(skip, len(buf) - at)
                at, skip = at + taken, skip - taken
            elif need:
                piece = buf[at : at + need]
                out.append(piece)
                at, need = at + len(piece), need - len(piece)
                skip = 0 if need else 2
            else:
                end = buf.find(b"\r\n", at)
                if end < 0:
                    if len(buf) - at > 1024:
                        raise http.client.HTTPException("chunk size line too long")
                    break
                # ValueError if it is no hex number
                size = int(buf[at:end].split(b";")[0], 16)
                at = end + 2
                # the last chunk (trailers, if any, are not read)
                if size == 0:
                    if out:
                        yield now, b"".join(out)
                    return
                need = size
        if out:
            yield now, out[0] if len(out) == 1 else b"".join(out)
        block = recv(sock, deadline, timeout)
        now = time.perf_counter()
        if not block:
            raise http.client.IncompleteRead(b"")
        buf = buf[at:] + block if at < len(buf) else block


def lines(blocks):
    """(arrival time, line) for each line of the stream; lines that arrived together share a time. A line that
    comes in many pieces is joined once, when it ends (linear in its length)."""
    pending = []
    now = None
    for now, block in blocks:
        start = 0
        end = block.find(b"\n")
        if end < 0:
            pending.append(block)
            continue
        if pending:
            pending.append(block[:end])
            yield now, b"".join(pending)
            pending = []
            start = end + 1
        while True:
            end = block.find(b"\n", start)
            if end < 0:
                break
            yield now, block[start:end]
            start = end + 1
        if start < len(block):
            pending.append(block[start:])
    if pending:
        yield now, b"".join(pending)


def get(port, path, timeout=5.0, limit=ANSWER_MAX, host=LOOPBACK, headers=None):
    """(status, body bytes) of one GET; the whole answer within `timeout` seconds (Late) and `limit` bytes
    (TooLarge); OSError / HTTPException as http.client raises them."""
    deadline = time.perf_counter() + timeout
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        arm(sock, deadline)
        sock.connect((host, int(port)))
        extra = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in (headers or {}).items())
        sock.sendall(
            b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept-Encoding: identity\r\nConnection: close\r\n%s\r\n"
            % (path.encode(), host.encode(), int(port), extra)
        )
        status, head, rest = read_head(sock, deadline)
        got, size = [], 0
        for _, block in body(sock, head, rest, deadline):
            size += len(block)
            if size > limit:
                raise TooLarge(f"{path} answered more than {limit} bytes")
            got.append(block)
        return status, b"".join(got)
    finally:
        sock.close()
