"""A hostile network on loopback: a TCP proxy that delays, splits and drops what passes through.

Why a proxy: this machine's kernel has no `tc netem`, and CI's may not either. A userspace proxy
in front of a sandbox sshd gives the SSH client what a far-away host gives it: every byte late
by 50 ms +- 10 ms in each direction (order kept, as TCP keeps it), data arriving in small random
pieces, an occasional lost segment (its bytes wait one retransmission timeout more, as TCP makes
them wait), and, when asked, connections cut in the middle. Loopback only: it listens on
127.0.0.1 and connects only to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
import time
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class NetProfile:
    """How bad the network is; the defaults are a far-away host on a slow link."""

    # one way, each direction
    delay_ms: float = 50.0
    # delay is uniform in delay +- jitter
    jitter_ms: float = 10.0
    # bytes are forwarded in random pieces of 1..max_chunk bytes
    max_chunk: int = 1448
    # link speed each way (0: unlimited); with `buffer`, a fast sender is held back
    rate_mbit: float = 100.0
    # bytes in flight per direction before the proxy stops reading (TCP back-pressure)
    buffer: int = 128 * 1024
    # chance that a piece is "lost": it (and what follows) waits one more rto_ms
    loss: float = 0.0
    rto_ms: float = 200.0
    # chance that a connection is cut after a random number of bytes
    drop: float = 0.0
    # ...somewhere within its first drop_within bytes (either direction)
    drop_within: int = 256 * 1024
    seed: int | None = None

    @classmethod
    def from_dict(cls, data: dict | bool | None) -> NetProfile:
        """`True` or `{}` for the defaults, or a dict of the fields above."""
        if data is True or data is None:
            return cls()
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"unknown network keys {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}"
            )
        return cls(**data)


@dataclass
class NetStats:
    """What went through, for benchmarks and tests."""

    connections: int = 0
    dropped: int = 0
    # server -> client
    bytes_down: int = 0
    pieces: int = 0
    lost_pieces: int = 0
    errors: list[str] = field(default_factory=list)


class NetProxy:
    """Listens on 127.0.0.1:port and forwards each connection to 127.0.0.1:target_port, badly.

    Runs its own asyncio loop in a daemon thread; `start()` returns once it listens.
    """

    def __init__(self, target_port: int, profile: NetProfile | None = None, port: int = 0) -> None:
        self.target_port = target_port
        self.profile = profile or NetProfile()
        self.port = port
        self.stats = NetStats()
        self._rng = random.Random(self.profile.seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> NetProxy:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._handle, LOOPBACK, self.port, reuse_address=True)
                )
                self.port = self._server.sockets[0].getsockname()[1]
            # reported to start() below
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                _cancel_all(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"netproxy:{self.target_port}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if tasks:
                # aborted connections end on their own
                await asyncio.wait(tasks, timeout=1)

        # loop already gone
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = self._server = None

    def cut_all(self) -> int:
        """Cut every open connection now (RST), as a dead link or a rebooted router would."""
        loop = self._loop
        if loop is None:
            return 0
        done = threading.Event()
        count = [0]

        def cut() -> None:
            for w in list(self._writers):
                w.transport.abort()
                count[0] += 1
            done.set()

        loop.call_soon_threadsafe(cut)
        done.wait(5)
        return count[0] // 2

    def __enter__(self) -> NetProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- one connection ------------------------------------------------------------------
    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        try:
            server_r, server_w = await self._open_upstream()
        except OSError as exc:
            self.stats.errors.append(f"connect to {self.target_port}: {exc}")
            client_w.transport.abort()
            return
        for w in (client_w, server_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._writers.add(w)
        p = self.profile
        budget = [self._rng.randint(0, p.drop_within)] if self._rng.random() < p.drop else None
        try:
            await asyncio.gather(
                self._pipe(client_r, server_w, "up", budget, (client_w, server_w)),
                self._pipe(server_r, client_w, "down", budget, (client_w, server_w)),
            )
        # stop(): the connection just ends
        except asyncio.CancelledError:
            pass
        finally:
            for w in (client_w, server_w):
                self._writers.discard(w)
                w.transport.abort()

    async def _open_upstream(self):
        """Connect to the target with a small receive buffer, so a slow link holds the sender back
        (loopback's default buffers would swallow megabytes and hide the back-pressure)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, max(4096, self.profile.buffer // 2))
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (LOOPBACK, self.target_port))
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)

    def _cut(self, budget: list[int] | None, size: int, both) -> bool:
        """Whether the connection's byte budget (`drop`) runs out before this piece: both sides are then
        cut."""
        if budget is None:
            return False
        if budget[0] < size:
            # once per connection: the other direction may cut it too
            if budget[0] >= 0:
                self.stats.dropped += 1
                budget[0] = -1
            for w in both:
                w.transport.abort()
            return True
        budget[0] -= size
        return False

    def _delay(self) -> float:
        """One piece's one-way delay in seconds: the link's delay with jitter, plus a retransmission if it
        is lost."""
        p = self.profile
        delay = (p.delay_ms + self._rng.uniform(-p.jitter_ms, p.jitter_ms)) / 1000
        if p.loss and self._rng.random() < p.loss:
            self.stats.lost_pieces += 1
            delay += p.rto_ms / 1000
        return delay

    async def _pipe(self, reader, writer, direction: str, budget: list[int] | None, both) -> None:
        """Read, cut into pieces, and deliver each piece at its due time (never before the one ahead)."""
        p = self.profile
        queue: asyncio.Queue = asyncio.Queue()

        in_flight = [0]
        room = asyncio.Event()
        room.set()
        per_byte = 8 / (p.rate_mbit * 1e6) if p.rate_mbit else 0.0

        async def deliver() -> None:
            # when the link has sent what it was given (rate limit)
            link_free = 0.0
            while True:
                due, piece = await queue.get()
                if piece is None:
                    break
                link_free = max(link_free, due) + len(piece) * per_byte
                wait = max(due, link_free) - time.monotonic()
                if wait > 0.001:
                    await asyncio.sleep(wait)
                try:
                    writer.write(piece)
                    await writer.drain()
                # the far side is gone (reset, cut): the reader side ends the pipe
                except OSError:
                    return
                in_flight[0] -= len(piece)
                if in_flight[0] <= p.buffer:
                    room.set()
            with contextlib.suppress(OSError):
                if writer.can_write_eof():
                    writer.write_eof()

        sender = asyncio.ensure_future(deliver())
        last_due = 0.0
        try:
            while True:
                await room.wait()
                data = await reader.read(1 << 16)
                if not data:
                    break
                in_flight[0] += len(data)
                if in_flight[0] > p.buffer:
                    room.clear()
                now = time.monotonic()
                for piece in self._pieces(data):
                    if self._cut(budget, len(piece), both):
                        return
                    last_due = max(last_due, now + self._delay())
                    queue.put_nowait((last_due, piece))
                    self.stats.pieces += 1
                    if direction == "down":
                        self.stats.bytes_down += len(piece)
            queue.put_nowait((0.0, None))
            await sender
        except (OSError, asyncio.IncompleteReadError):
            for w in both:
                w.transport.abort()
        finally:
            if not sender.done():
                sender.cancel()
            # retrieved here, never logged from a GC later
            with contextlib.suppress(BaseException):
                await sender

    def _pieces(self, data: bytes):
        size = self.profile.max_chunk
        i = 0
        while i < len(data):
            n = self._rng.randint(1, size)
            yield data[i : i + n]
            i += n


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and await every task left on the proxy's loop, connections accepted late included.

    A task left pending (or failed and never awaited) is logged by the garbage collector whenever it collects
    it, which may be in the middle of an ast.parse in any thread: the finalizer formats a traceback (itself
    parsing with ast on Python 3.11), and CPython 3.11's AST constructor then fails with "AST constructor
    recursion depth mismatch" (pytest-dev/pytest#10874; sglops/patch/names.py met it first). A CI run lost a
    patch test to it."""
    for _ in range(5):
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not tasks:
            return
        for t in tasks:
            t.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
