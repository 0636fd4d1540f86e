"""HTTP/1.1 transports: a thread-safe keep-alive pool over ``http.client``
for synchronous calls, and a small asyncio HTTP/1.1 client (asyncio streams,
keep-alive, a bounded connection pool per event loop, chunked decoding) for
``.aio`` calls.

Both answer :class:`Response` (whole body) or a streaming response whose
lines are read as they arrive (NDJSON). Failures become
:mod:`fedrouter.errors` transport errors:

- the router cannot be reached: :class:`ConnectError`;
- the connection drops after the request went out: :class:`ConnectionLost`
  (never retried for non-idempotent calls; an idempotent call that fails on a
  *reused* keep-alive connection before any answer byte is retried once on a
  fresh connection, the usual stale keep-alive race);
- no answer within the timeout: :class:`Timeout`.
"""
from __future__ import annotations

import asyncio
import http.client
import select
import socket
import ssl
import threading
import time
import weakref
from typing import (Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Tuple)

from .errors import ConnectError, ConnectionLost, Timeout, TransportError

# Drop pooled connections idle longer than this (the router closes keep-alive
# connections after 60 s idle by default).
IDLE_REUSE_S = 45.0


class Response:
    """A complete HTTP answer: ``status``, ``headers`` (lower-case names) and
    ``body`` (bytes)."""
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


def _stale(sock: Optional[socket.socket]) -> bool:
    """True if a pooled idle socket has been closed by the peer (or has
    unexpected bytes waiting): not reusable."""
    if sock is None:
        return True
    try:
        r, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(r)


# ----------------------------------------------------------------- sync ---

class SyncStream:
    """A streaming answer on a pooled connection: iterate ``lines()``; the
    connection goes back to the pool when the body was read to its end and
    is closed otherwise (``close()``)."""

    def __init__(self, pool: "SyncPool", conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse, request_id: str) -> None:
        self._pool = pool
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._resp = resp
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}
        self.request_id = request_id

    def lines(self) -> Iterator[bytes]:
        """Yields the body's lines (without the newline) as they arrive."""
        try:
            while True:
                try:
                    line = self._resp.readline(1 << 24)
                except socket.timeout as e:
                    raise Timeout("no output from the router within the timeout",
                                  request_id=self.request_id) from e
                except (OSError, http.client.HTTPException) as e:
                    raise ConnectionLost(f"connection dropped mid-stream: {e!r}",
                                         request_id=self.request_id) from e
                if not line:
                    break
                line = line.rstrip(b"\r\n")
                if line:
                    yield line
        finally:
            self.close()

    def read(self) -> bytes:
        try:
            data = self._resp.read()
        except socket.timeout as e:
            self.close()
            raise Timeout("no answer within the timeout", request_id=self.request_id) from e
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise ConnectionLost(f"connection dropped: {e!r}", request_id=self.request_id) from e
        self.close()
        return data

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._resp.isclosed() and not self._resp.will_close:
            self._pool._release(conn)
        else:
            conn.close()


class SyncPool:
    """Thread-safe keep-alive connection pool to one router (``http.client``).

    Connections are created on demand (no cap on concurrent calls: each
    thread gets its own connection) and at most ``max_idle`` idle ones are
    kept for reuse."""

    def __init__(self, host: str, port: int, tls: bool, ssl_context: Optional[ssl.SSLContext],
                 connect_timeout: float, max_idle: int = 64) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self._idle: List[Tuple[http.client.HTTPConnection, float]] = []
        self._lock = threading.Lock()
        self.opened = 0  # connections opened so far (tests, stats)

    def _new(self) -> http.client.HTTPConnection:
        if self.tls:
            c: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.connect_timeout, context=self.ssl_context)
        else:
            c = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        try:
            c.connect()
        except socket.timeout as e:
            c.close()
            raise ConnectError(f"connect to {self.host}:{self.port} timed out") from e
        except (OSError, ssl.SSLError) as e:
            c.close()
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {e}") from e
        try:
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        with self._lock:
            self.opened += 1
        return c

    def _acquire(self) -> Tuple[http.client.HTTPConnection, bool]:
        now = time.monotonic()
        while True:
            with self._lock:
                if not self._idle:
                    break
                c, t = self._idle.pop()
            if now - t < IDLE_REUSE_S and not _stale(c.sock):
                return c, True
            c.close()
        return self._new(), False

    def _release(self, c: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append((c, time.monotonic()))
                return
        c.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c, _ in idle:
            c.close()

    def _send(self, method: str, path: str, body: Optional[bytes], headers: Mapping[str, str],
              timeout: float, idempotent: bool, request_id: str
              ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        attempt = 0
        while True:
            attempt += 1
            c, reused = self._acquire()
            sent = False
            try:
                c.sock.settimeout(timeout)
                c.request(method, path, body=body, headers=dict(headers))
                sent = True
                return c, c.getresponse()
            except socket.timeout as e:
                c.close()
                raise Timeout(f"{method} {path}: no answer within {timeout:g} s",
                              request_id=request_id) from e
            except (OSError, http.client.HTTPException) as e:
                c.close()
                # A reused keep-alive connection the router closed while idle:
                # nothing of this request was processed. Safe to try again
                # for idempotent calls only.
                if reused and idempotent and attempt == 1:
                    continue
                if not sent and not reused:
                    raise ConnectError(f"{method} {path}: {e!r}", request_id=request_id) from e
                raise ConnectionLost(f"{method} {path}: connection dropped before the answer: {e!r}",
                                     request_id=request_id) from e

    def request(self, method: str, path: str, body: Optional[bytes], headers: Mapping[str, str],
                timeout: float, idempotent: bool, request_id: str) -> Response:
        c, resp = self._send(method, path, body, headers, timeout, idempotent, request_id)
        try:
            data = resp.read()
        except socket.timeout as e:
            c.close()
            raise Timeout(f"{method} {path}: answer incomplete within {timeout:g} s",
                          request_id=request_id) from e
        except (OSError, http.client.HTTPException) as e:
            c.close()
            raise ConnectionLost(f"{method} {path}: connection dropped mid-answer: {e!r}",
                                 request_id=request_id) from e
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        if resp.will_close:
            c.close()
        else:
            self._release(c)
        return Response(resp.status, hdrs, data)

    def stream(self, method: str, path: str, body: Optional[bytes], headers: Mapping[str, str],
               timeout: float, idempotent: bool, request_id: str) -> SyncStream:
        c, resp = self._send(method, path, body, headers, timeout, idempotent, request_id)
        return SyncStream(self, c, resp, request_id)


# ---------------------------------------------------------------- async ---

class _AioConn:
    __slots__ = ("reader", "writer", "last_used")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.last_used = time.monotonic()

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # the loop may be closing
            pass

    def usable(self) -> bool:
        if self.writer.is_closing() or self.reader.at_eof():
            return False
        if time.monotonic() - self.last_used > IDLE_REUSE_S:
            return False
        # Bytes or EOF waiting on an idle connection: the peer closed it.
        if self.reader._buffer:  # type: ignore[attr-defined]
            return False
        return True


def _head_bytes(method: str, path: str, host: str, headers: Mapping[str, str],
                body: Optional[bytes]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    for k, v in headers.items():
        lines.append(f"{k}: {v}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _AioResponseHead:
    __slots__ = ("status", "headers", "keep_alive", "length", "chunked")

    def __init__(self, status: int, headers: Dict[str, str], keep_alive: bool,
                 length: Optional[int], chunked: bool) -> None:
        self.status, self.headers, self.keep_alive = status, headers, keep_alive
        self.length, self.chunked = length, chunked


async def _read_head(reader: asyncio.StreamReader, method: str) -> _AioResponseHead:
    while True:
        raw = await reader.readuntil(b"\r\n\r\n")
        text = raw.decode("latin-1")
        lines = text.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise http.client.BadStatusLine(lines[0])
        status = int(parts[1])
        headers: Dict[str, str] = {}
        for ln in lines[1:]:
            if not ln:
                continue
            k, _, v = ln.partition(":")
            k = k.strip().lower()
            v = v.strip()
            headers[k] = headers[k] + ", " + v if k in headers else v
        if 100 <= status < 200:
            continue  # 100 Continue and friends: the real answer follows
        conn_hdr = headers.get("connection", "").lower()
        keep = parts[0] == "HTTP/1.1" and "close" not in conn_hdr
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length: Optional[int] = None
        if method == "HEAD" or status in (204, 304):
            length = 0
        elif not chunked and "content-length" in headers:
            length = int(headers["content-length"])
        elif not chunked:
            keep = False  # body runs to EOF
        return _AioResponseHead(status, headers, keep, length, chunked)


async def _iter_body(reader: asyncio.StreamReader, head: _AioResponseHead) -> AsyncIterator[bytes]:
    """Yields the body's pieces as they arrive (chunked decoding)."""
    if head.chunked:
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif head.length is not None:
        left = head.length
        while left > 0:
            data = await reader.read(min(left, 1 << 20))
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(data)
            yield data
    else:
        while True:
            data = await reader.read(1 << 20)
            if not data:
                return
            yield data


class _LoopPool:
    """Idle connections and the connection bound of one event loop."""

    def __init__(self, max_connections: int) -> None:
        self.idle: List[_AioConn] = []
        self.sem = asyncio.Semaphore(max_connections)
        self.opened = 0


_HAS_TIMEOUT = hasattr(asyncio, "timeout")  # Python 3.11+

_TRANSPORT_ERRORS = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                     http.client.HTTPException, ValueError, ssl.SSLError)


class AioStream:
    """A streaming answer of the asyncio client; ``async for line in
    s.lines()``; ``await s.aclose()``."""

    def __init__(self, pool: "AioPool", lp: _LoopPool, conn: _AioConn, head: _AioResponseHead,
                 timeout: float, request_id: str) -> None:
        self._pool, self._lp, self._conn = pool, lp, conn
        self._head = head
        self.status = head.status
        self.headers = head.headers
        self._timeout = timeout
        self.request_id = request_id
        self._done = False
        self._closed = False

    async def _pieces(self) -> AsyncIterator[bytes]:
        it = _iter_body(self._conn.reader, self._head).__aiter__()
        while True:
            try:
                piece = await asyncio.wait_for(it.__anext__(), self._timeout)
            except StopAsyncIteration:
                self._done = True
                return
            except asyncio.TimeoutError as e:
                raise Timeout(f"no output within {self._timeout:g} s", request_id=self.request_id) from e
            except _TRANSPORT_ERRORS as e:
                raise ConnectionLost(f"connection dropped mid-stream: {e!r}",
                                     request_id=self.request_id) from e
            yield piece

    async def lines(self) -> AsyncIterator[bytes]:
        buf = b""
        try:
            async for piece in self._pieces():
                buf += piece
                while True:
                    i = buf.find(b"\n")
                    if i < 0:
                        break
                    line, buf = buf[:i].rstrip(b"\r"), buf[i + 1:]
                    if line:
                        yield line
            if buf.strip():
                yield buf.strip()
        finally:
            await self.aclose()

    async def read(self) -> bytes:
        out = []
        try:
            async for piece in self._pieces():
                out.append(piece)
        finally:
            await self.aclose()
        return b"".join(out)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._done and self._head.keep_alive:
            self._pool._release(self._lp, self._conn)
        else:
            self._conn.close()
        self._lp.sem.release()


class AioPool:
    """asyncio HTTP/1.1 client with keep-alive and, per event loop, a pool
    bounded by ``max_connections`` (calls beyond it wait for a connection)."""

    def __init__(self, host: str, port: int, tls: bool, ssl_context: Optional[ssl.SSLContext],
                 connect_timeout: float, max_connections: int = 2048) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self._loops: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPool]" = \
            weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self.host_header = host if port in (80, 443) else f"{host}:{port}"

    def _loop_pool(self) -> _LoopPool:
        loop = asyncio.get_running_loop()
        lp = self._loops.get(loop)
        if lp is None:
            with self._lock:
                lp = self._loops.get(loop)
                if lp is None:
                    lp = _LoopPool(self.max_connections)
                    self._loops[loop] = lp
        return lp

    def opened(self) -> int:
        """Connections opened on the running loop so far."""
        return self._loop_pool().opened

    async def _new(self, lp: _LoopPool, request_id: str) -> _AioConn:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self.ssl_context if self.tls else None,
                                        limit=1 << 20),
                self.connect_timeout)
        except asyncio.TimeoutError as e:
            raise ConnectError(f"connect to {self.host}:{self.port} timed out", request_id=request_id) from e
        except (OSError, ssl.SSLError) as e:
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {e}", request_id=request_id) from e
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        lp.opened += 1
        return _AioConn(reader, writer)

    def _release(self, lp: _LoopPool, conn: _AioConn) -> None:
        conn.last_used = time.monotonic()
        lp.idle.append(conn)

    async def _send(self, lp: _LoopPool, method: str, path: str, body: Optional[bytes],
                    headers: Mapping[str, str], idempotent: bool,
                    request_id: str) -> Tuple[_AioConn, _AioResponseHead]:
        """Sends the request and reads the answer's head (the caller holds
        one of the loop's connection slots and bounds the time). The
        connection is closed on any failure, cancellation included."""
        data = _head_bytes(method, path, self.host_header, headers, body)
        if body:
            data += body
        attempt = 0
        while True:
            attempt += 1
            conn = None
            while lp.idle:
                c = lp.idle.pop()
                if c.usable():
                    conn = c
                    break
                c.close()
            reused = conn is not None
            if conn is None:
                conn = await self._new(lp, request_id)
            try:
                conn.writer.write(data)
                if len(data) > 65536:
                    await conn.writer.drain()
                return conn, await _read_head(conn.reader, method)
            except _TRANSPORT_ERRORS as e:
                conn.close()
                if reused and idempotent and attempt == 1:
                    continue
                raise ConnectionLost(f"{method} {path}: connection dropped before the answer: {e!r}",
                                     request_id=request_id) from e
            except BaseException:
                conn.close()
                raise

    async def _exchange(self, lp: _LoopPool, method: str, path: str, body: Optional[bytes],
                        headers: Mapping[str, str], idempotent: bool, request_id: str) -> Response:
        conn, head = await self._send(lp, method, path, body, headers, idempotent, request_id)
        try:
            if head.length is not None and not head.chunked:
                body_bytes = await conn.reader.readexactly(head.length) if head.length else b""
            else:
                parts = [p async for p in _iter_body(conn.reader, head)]
                body_bytes = b"".join(parts)
        except _TRANSPORT_ERRORS as e:
            conn.close()
            raise ConnectionLost(f"{method} {path}: connection dropped mid-answer: {e!r}",
                                 request_id=request_id) from e
        except BaseException:
            conn.close()
            raise
        if head.keep_alive:
            self._release(lp, conn)
        else:
            conn.close()
        return Response(head.status, head.headers, body_bytes)

    async def request(self, method: str, path: str, body: Optional[bytes], headers: Mapping[str, str],
                      timeout: float, idempotent: bool, request_id: str) -> Response:
        lp = self._loop_pool()
        await lp.sem.acquire()
        try:
            if _HAS_TIMEOUT:  # one deadline for the whole call, no extra task
                try:
                    async with asyncio.timeout(timeout):  # type: ignore[attr-defined]
                        return await self._exchange(lp, method, path, body, headers, idempotent, request_id)
                except TimeoutError as e:
                    raise Timeout(f"{method} {path}: no complete answer within {timeout:g} s",
                                  request_id=request_id) from e
            try:
                return await asyncio.wait_for(
                    self._exchange(lp, method, path, body, headers, idempotent, request_id), timeout)
            except asyncio.TimeoutError as e:
                raise Timeout(f"{method} {path}: no complete answer within {timeout:g} s",
                              request_id=request_id) from e
        finally:
            lp.sem.release()

    async def stream(self, method: str, path: str, body: Optional[bytes], headers: Mapping[str, str],
                     timeout: float, idempotent: bool, request_id: str) -> AioStream:
        lp = self._loop_pool()
        await lp.sem.acquire()
        try:
            try:
                conn, head = await asyncio.wait_for(
                    self._send(lp, method, path, body, headers, idempotent, request_id), timeout)
            except asyncio.TimeoutError as e:
                raise Timeout(f"{method} {path}: no answer within {timeout:g} s", request_id=request_id) from e
        except BaseException:
            lp.sem.release()
            raise
        return AioStream(self, lp, conn, head, timeout, request_id)

    async def aclose(self) -> None:
        """Closes the idle connections of the running loop's pool."""
        loop = asyncio.get_running_loop()
        lp = self._loops.pop(loop, None)
        if lp is None:
            return
        idle, lp.idle = lp.idle, []
        for c in idle:
            c.close()
        for c in idle:
            try:
                await c.writer.wait_closed()
            except Exception:
                pass


def is_transport_error(e: BaseException) -> bool:
    return isinstance(e, TransportError)


__all__ = ["Response", "SyncPool", "SyncStream", "AioPool", "AioStream", "is_transport_error", "Any"]
