"""SocketServer: accepts TCP connections and moves length-prefixed Kafka frames to and from a handler.

Each connection reads into one growing buffer, cuts it into frames (4-byte big-endian length first),
hands every complete frame to the request handler in arrival order and writes the responses back in
that same order (clients pipeline requests). Responses are lists of chunks: bytes-like chunks are
coalesced into as few ``send`` calls as possible, and file regions (objects with ``fd``, ``position``
and ``size``) go from the page cache to the socket with ``os.sendfile`` -- or, with ``use_sendfile``
off (``socket.sendfile.enable=false``, for comparing the two in benchmarks), are read with ``os.pread``
and sent like any other bytes.

A frame longer than ``socket.request.max.bytes``, or a handler that raises, closes only that connection.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import struct
from typing import Any, Awaitable, Callable, Protocol, Sequence

log = logging.getLogger(__name__)

_FRAME_LENGTH = struct.Struct(">i")
_READ_SIZE = 256 * 1024
# Bytes of pending small responses worth one send call before handling more frames.
_COALESCE_LIMIT = 256 * 1024


class FileRegion(Protocol):
    """A range of a file to send without copying it through the process."""

    fd: int
    position: int
    size: int

    def close(self) -> None: ...


class CloseConnection(Exception):
    """Raised by a handler to drop the connection after logging why (e.g. a malformed request)."""


Chunks = Sequence[Any]
# The handler takes a frame (without its length prefix) and the connection's peer name; it returns the
# response chunks, None for no response (acks=0), or an awaitable of either (e.g. a long-polling fetch).
Handler = Callable[[memoryview, str], "Chunks | None | Awaitable[Chunks | None]"]


class SocketServer:
    """Listens on one address and serves every connection with the given request handler."""

    def __init__(self, host: str, port: int, handler: Handler, max_request_bytes: int, *,
                 use_sendfile: bool = True) -> None:
        self._host = host
        self._use_sendfile = use_sendfile
        self._port = port
        self._handler = handler
        self._max_request_bytes = max_request_bytes
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._connections: set[asyncio.Task] = set()
        self.bound_port: int = port

    async def start(self) -> None:
        """Bind and start accepting; ``bound_port`` holds the real port afterwards (port 0 picks one)."""
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._host, self._port))
        listener.listen(512)
        listener.setblocking(False)
        self._listener = listener
        self.bound_port = listener.getsockname()[1]
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop())

    async def stop_accepting(self) -> None:
        """Close the listening socket; established connections go on until close_all()."""
        if self._accept_task is not None:
            self._accept_task.cancel()
            try:
                await self._accept_task
            except asyncio.CancelledError:
                pass
            self._accept_task = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    async def close_all(self) -> None:
        """Close every client connection."""
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            try:
                sock, addr = await loop.sock_accept(self._listener)
            except OSError as exc:
                # EMFILE and friends: keep the server alive, back off briefly.
                log.error("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = f"{addr[0]}:{addr[1]}"
            task = loop.create_task(self._serve(sock, peer))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, sock: socket.socket, peer: str) -> None:
        connection = _Connection(sock, peer, self._handler, self._max_request_bytes, self._use_sendfile)
        try:
            await connection.run()
        except (ConnectionError, TimeoutError) as exc:
            log.debug("connection %s ended: %s", peer, exc)
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing connection from %s after an unexpected error", peer)
        finally:
            connection.release()
            sock.close()


class _Connection:
    """One client connection: frame reading, in-order handling and response writing."""

    def __init__(self, sock: socket.socket, peer: str, handler: Handler, max_request_bytes: int,
                 use_sendfile: bool = True) -> None:
        self.sock = sock
        self.send_region = _sendfile if use_sendfile else _read_and_send
        self.peer = peer
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.loop = asyncio.get_running_loop()
        self.buffer = bytearray(_READ_SIZE)
        self.start = 0
        self.end = 0
        self.pending: list[Any] = []
        self.pending_bytes = 0

    def release(self) -> None:
        for chunk in self.pending:
            if not isinstance(chunk, (bytes, bytearray, memoryview)):
                chunk.close()
        self.pending.clear()

    async def run(self) -> None:
        while True:
            if not await self._fill():
                return
            await self._handle_frames()
            if self.pending:
                await self._flush()

    async def _fill(self) -> bool:
        """Read more bytes; False at a clean end of stream."""
        if self.start == self.end:
            self.start = self.end = 0
        elif self.start > 0 and len(self.buffer) - self.end < _READ_SIZE // 4:
            # Move the unread tail to the front instead of growing forever.
            remaining = self.end - self.start
            self.buffer[:remaining] = self.buffer[self.start : self.end]
            self.start, self.end = 0, remaining
        if len(self.buffer) - self.end < 4096:
            # A new buffer rather than extend(): views of old frames may still be alive.
            grown = bytearray(len(self.buffer) * 2)
            grown[: self.end - self.start] = self.buffer[self.start : self.end]
            self.buffer, self.end, self.start = grown, self.end - self.start, 0
        view = memoryview(self.buffer)[self.end :]
        try:
            n = await self.loop.sock_recv_into(self.sock, view)
        finally:
            view.release()
        if n == 0:
            if self.end > self.start:
                log.warning("connection from %s closed in the middle of a frame (%d bytes unread)",
                            self.peer, self.end - self.start)
            return False
        self.end += n
        return True

    async def _handle_frames(self) -> None:
        while self.end - self.start >= 4:
            (length,) = _FRAME_LENGTH.unpack_from(self.buffer, self.start)
            if length < 0 or length > self.max_request_bytes:
                raise CloseConnection(
                    f"frame of {length} bytes is outside 0..socket.request.max.bytes ({self.max_request_bytes})")
            frame_end = self.start + 4 + length
            if frame_end > self.end:
                if frame_end - self.start > len(self.buffer):
                    # Make room for the whole frame in one place.
                    tail = bytes(self.buffer[self.start : self.end])
                    self.buffer = bytearray(max(frame_end - self.start, len(self.buffer) * 2))
                    self.buffer[: len(tail)] = tail
                    self.start, self.end = 0, len(tail)
                return
            frame = memoryview(self.buffer)[self.start + 4 : frame_end]
            self.start = frame_end
            try:
                response = self.handler(frame, self.peer)
                if response is not None and not isinstance(response, (list, tuple)):
                    # A handler waiting for data: send what is ready first so earlier responses are not held.
                    if self.pending:
                        await self._flush()
                    response = await response
            finally:
                frame.release()
            if response:
                self._queue(response)
                if self.pending_bytes >= _COALESCE_LIMIT:
                    await self._flush()

    def _queue(self, chunks: Chunks) -> None:
        for chunk in chunks:
            self.pending.append(chunk)
            self.pending_bytes += chunk.size if not isinstance(chunk, (bytes, bytearray, memoryview)) else len(chunk)

    async def _flush(self) -> None:
        chunks, self.pending, self.pending_bytes = self.pending, [], 0
        run: list[Any] = []
        try:
            for index, chunk in enumerate(chunks):
                if isinstance(chunk, (bytes, bytearray, memoryview)):
                    run.append(chunk)
                    continue
                if run:
                    await self.loop.sock_sendall(self.sock, b"".join(run) if len(run) > 1 else run[0])
                    run = []
                try:
                    await self.send_region(self.loop, self.sock, chunk.fd, chunk.position, chunk.size)
                finally:
                    chunk.close()
                    chunks[index] = b""
            if run:
                await self.loop.sock_sendall(self.sock, b"".join(run) if len(run) > 1 else run[0])
        finally:
            for chunk in chunks:
                if not isinstance(chunk, (bytes, bytearray, memoryview)):
                    chunk.close()


async def _sendfile(loop: asyncio.AbstractEventLoop, sock: socket.socket, fd: int, position: int, size: int) -> None:
    """Send ``size`` bytes of ``fd`` from ``position`` with os.sendfile, waiting for the socket as needed.

    Written here rather than using loop.sock_sendfile because uvloop does not implement it. A file that
    became shorter than the region (retention, truncation) is an error: the frame would be short.
    """
    out = sock.fileno()
    while size > 0:
        try:
            sent = os.sendfile(out, fd, position, size)
        except BlockingIOError:
            await _writable(loop, sock)
            continue
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            raise
        if sent == 0:
            raise ConnectionError(f"file region ended {size} bytes early")
        position += sent
        size -= sent


async def _read_and_send(loop: asyncio.AbstractEventLoop, sock: socket.socket, fd: int, position: int,
                         size: int) -> None:
    """Send ``size`` bytes of ``fd`` from ``position`` by reading them into memory first (no sendfile)."""
    while size > 0:
        data = os.pread(fd, min(size, _READ_SIZE * 4), position)
        if not data:
            raise ConnectionError(f"file region ended {size} bytes early")
        await loop.sock_sendall(sock, data)
        position += len(data)
        size -= len(data)


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    future = loop.create_future()

    def ready() -> None:
        if not future.done():
            future.set_result(None)

    loop.add_writer(sock.fileno(), ready)
    try:
        await future
    finally:
        loop.remove_writer(sock.fileno())
