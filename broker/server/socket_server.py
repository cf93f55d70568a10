"""SocketServer: accepts TCP connections and moves length-prefixed Kafka frames to and from a handler.

Each connection reads into its own :class:`~broker.server.receive_buffer.ReceiveBuffer`, hands every
complete frame to the request handler in arrival order and writes the responses back in that same
order (clients pipeline requests). Responses are lists of chunks: bytes-like chunks are coalesced into
as few ``send`` calls as possible, and file regions (objects with ``fd``, ``position`` and ``size``) go
from the page cache to the socket with ``os.sendfile`` -- or, with ``use_sendfile`` off
(``socket.sendfile.enable=false``, for comparing the two in benchmarks), are read with ``os.pread`` and
sent like any other bytes.

Whatever clients send, memory and service stay bounded:
- request bytes read but not yet answered are capped across all connections (``queued.max.request.bytes``,
  :class:`~broker.server.memory_pool.RequestMemoryPool`): at the cap, connections stop reading;
- a connection handles at most ``FRAMES_PER_TURN`` frames before yielding to the others;
- connections over ``max.connections.per.ip`` (or its per-address override) are closed right after
  accept; at ``max.connections`` (unlimited by default, as in Kafka), a connection from an address holding
  fewer connections than the busiest one takes the place of that address's least recently active
  connection, so that one address cannot starve the others;
- connections silent for ``connections.max.idle.ms``, and connections silent for ``socket.request.read.timeout.ms``
  in the middle of a frame, are closed by a periodic scan;
- a connection whose request is parked (a :class:`Deferred` answer that only waits: a long-polling fetch,
  a JoinGroup waiting for the rebalance) watches its socket: when the client goes away, the socket and its
  place in the quotas are given back at once and the wait is cancelled (its answer would go nowhere), as
  Kafka's purgatory completes it; a client found gone by the periodic scan while another request runs (a
  commit being written), or when an answer cannot be sent, is given back the same way, its requests left to
  run;
- when accept fails for lack of file descriptors, the server backs off (logging at most every few
  seconds) and goes on serving the connections it has.

Every request read whole is executed exactly once, in order, even when its client went away before its
answer (a reset after pipelined requests): answers to a gone client are discarded, the requests are not.
A frame longer than ``socket.request.max.bytes``, or a handler that raises, closes only that connection.
Warnings about what clients send are limited per client address and kind (:class:`WarningLimiter`) and
counted by kind in ``client_errors``.

One server listens on every :class:`Listener` (Kafka's listeners: ``PLAINTEXT://...,SSL://...``), sharing the
limits above; each connection's Session names its listener and security protocol. Connections of a listener with
an ``ssl_context`` speak TLS through a :class:`~broker.server.tls_channel.TlsChannel`: the handshake comes first,
bounded by ``socket.request.read.timeout.ms`` (or ``connections.max.idle.ms``) like a partial frame; a failed one
closes only that connection and counts as ``authentication_failed`` (as a refused SASL login does); a client
certificate makes the principal. PLAINTEXT connections use the socket directly, as before.
Connections of a SASL_PLAINTEXT or SASL_SSL listener start with the authenticator its ``authenticator`` factory
makes (:class:`~broker.server.sasl_authenticator.SaslServerAuthenticator`): while ``session.authenticator`` is set
every frame goes to it instead of the handler, a refused exchange is answered and the connection closed after
``connection.failed.authentication.delay.ms``, and the periodic scan closes an exchange that outlives its deadline.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol, Sequence

from broker.security.listeners import EndPoint
from broker.security.ssl_factory import certificate_principal
from broker.server.connection_quotas import ConnectionQuotas
from broker.server.memory_pool import RequestMemoryPool
from broker.server.receive_buffer import READ_SIZE, FrameTooLarge, ReceiveBuffer
from broker.server.sasl_authenticator import AuthenticationStats, CloseAfterResponse, Refused
from broker.server.session import Session
from broker.server.tls_channel import TlsChannel, TlsHandshakeFailed
from pipeline.warning_limiter import WarningLimiter

log = logging.getLogger(__name__)

# Bytes of pending small responses worth one send call before handling more frames.
_COALESCE_LIMIT = 256 * 1024
# Frames one connection handles before letting the others run.
FRAMES_PER_TURN = 100
# Accept failures for lack of descriptors: retry after a delay doubling up to the maximum; log at most
# once per interval while they last.
_ACCEPT_BACKOFF_MIN = 0.02
_ACCEPT_BACKOFF_MAX = 1.0
_ACCEPT_LOG_INTERVAL = 10.0
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# The periodic scan runs this often at most, and often enough to close a connection within ~1.25x the idle
# timeout.
_SCAN_MAX_INTERVAL = 5.0
UNLIMITED = 2**31 - 1
# The client-errors kind of a failed authentication (a TLS handshake here; a SASL exchange counts the same).
FAILED_AUTHENTICATION = "authentication_failed"


@dataclass(frozen=True)
class Listener:
    """One listening endpoint; ``ssl_context`` (a server context) for SSL and SASL_SSL listeners, ``authenticator``
    for SASL_PLAINTEXT and SASL_SSL ones."""

    endpoint: EndPoint
    ssl_context: ssl.SSLContext | None = None
    authenticator: AuthenticatorFactory | None = None

    @property
    def name(self) -> str:
        return self.endpoint.listener_name


class FileRegion(Protocol):
    """A range of a file to send without copying it through the process."""

    fd: int
    position: int
    size: int

    def close(self) -> None: ...


class CloseConnection(Exception):
    """Raised by a handler to drop the connection after logging why (e.g. a malformed request); ``kind``
    names the problem in the rate-limited warning and the client-errors metric."""

    def __init__(self, message: str, kind: str = "refused_request") -> None:
        super().__init__(message)
        self.kind = kind


class Deferred:
    """A response that comes later: the server awaits the handler's ``awaitable`` and turns its result into
    response chunks with ``finish`` (None: the result is the chunks).

    ``parked``: the awaitable only waits (Kafka's purgatory: a long-polling fetch, a JoinGroup waiting for the
    rebalance), so the server cancels it when its client goes away; other deferred responses run to their end
    whatever the client does. Handing the server the handler's own coroutine, rather than one wrapping it, is
    what lets it close or cancel that coroutine cleanly when it never gets to run.
    """

    __slots__ = ("awaitable", "finish", "parked")

    def __init__(self, awaitable: Awaitable[Any], finish: Callable[[Any], Chunks | None] | None = None,
                 parked: bool = False) -> None:
        self.awaitable = awaitable
        self.finish = finish
        self.parked = parked


class ClientGone(ConnectionError):
    """The client closed or reset the connection while the broker held requests of it."""


Chunks = Sequence[Any]
# The handler takes a frame (without its length prefix) and the connection's Session; it returns the
# response chunks, None for no response (acks=0), or a Deferred (or bare awaitable) of either (e.g. a
# long-polling fetch).
Handler = Callable[[memoryview, Session], "Chunks | None | Deferred | Awaitable[Chunks | None]"]
# Makes the authenticator of a new connection's Session on a SASL listener (see sasl_authenticator).
AuthenticatorFactory = Callable[[Session, Handler], Any]


class SocketServer:
    """Listens on its listeners and serves every connection with the given request handler.

    ``host`` and ``port`` make one PLAINTEXT listener unless ``listeners`` are given. ``queued_max_request_bytes``
    None (or negative), ``connections_max_idle_ms`` and ``request_read_timeout_ms`` None (or negative) mean no cap
    and no timeout. Each connection's Session names its listener and security protocol; on a listener with an
    ``authenticator`` (SASL listeners), each connection starts with the authenticator it makes, which sees every
    frame until it lets go.
    """

    def __init__(self, host: str, port: int, handler: Handler, max_request_bytes: int, *,
                 listeners: Sequence[Listener] = (),
                 use_sendfile: bool = True, queued_max_request_bytes: int | None = None,
                 connections_max_idle_ms: int | None = None, max_connections: int = UNLIMITED,
                 max_connections_per_ip: int = UNLIMITED,
                 max_connections_per_ip_overrides: dict[str, int] | None = None,
                 request_read_timeout_ms: int | None = None) -> None:
        self.listeners = list(listeners) or [Listener(EndPoint("PLAINTEXT", "PLAINTEXT", host, port))]
        self._use_sendfile = use_sendfile
        self._handler = handler
        self._max_request_bytes = max_request_bytes
        cap = queued_max_request_bytes
        self.memory_pool = RequestMemoryPool(cap if cap is not None and cap > 0 else None)
        idle = connections_max_idle_ms
        self._idle_seconds = idle / 1000 if idle is not None and idle > 0 else None
        partial = request_read_timeout_ms
        self._partial_seconds = partial / 1000 if partial is not None and partial > 0 else None
        self.warnings = WarningLimiter(log)
        self.quotas = ConnectionQuotas(max_connections, max_connections_per_ip, max_connections_per_ip_overrides)
        # A TLS handshake gets as long as the rest of a started request frame would.
        self._handshake_seconds = self._partial_seconds or self._idle_seconds
        self._sockets: list[socket.socket] = []
        self._tasks: list[asyncio.Task] = []
        self.connections: dict[asyncio.Task, _Connection] = {}
        # Connections served since start and those of them that ended (refused ones are not counted).
        self.connections_created = 0
        self.connections_closed = 0
        # Each listener's port once bound (port 0 picks a free one), by listener name.
        self.bound_ports: dict[str, int] = {listener.name: listener.endpoint.port for listener in self.listeners}
        # Where failed TLS handshakes are counted as failed authentications (mechanism "SSL"), if anywhere.
        self.authentication_stats: AuthenticationStats | None = None

    @property
    def bound_port(self) -> int:
        """The first listener's port."""
        return self.bound_ports[self.listeners[0].name]

    async def start(self) -> None:
        """Bind every listener and start accepting; ``bound_ports`` holds the real ports afterwards."""
        loop = asyncio.get_running_loop()
        try:
            for listener in self.listeners:
                host = listener.endpoint.host
                sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, listener.endpoint.port))
                sock.listen(512)
                sock.setblocking(False)
                self.bound_ports[listener.name] = sock.getsockname()[1]
        except BaseException:
            self._close_sockets()
            raise
        for listener, sock in zip(self.listeners, self._sockets):
            self._tasks.append(loop.create_task(self._accept_loop(listener, sock)))
        self._tasks.append(loop.create_task(self._scan(self._idle_seconds, self._partial_seconds)))

    async def stop_accepting(self) -> None:
        """Close the listening sockets; established connections go on until close_all()."""
        await _cancel(self._tasks)
        self._tasks.clear()
        self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()

    async def close_all(self) -> None:
        """Close every client connection."""
        await _cancel(list(self.connections))

    @property
    def connection_count(self) -> int:
        """Open client connections (not those whose client left while their last requests finish)."""
        return self.quotas.total

    @property
    def client_errors(self) -> dict[str, int]:
        """Connections closed or refused, and requests refused (the request handlers share the limiter), for
        what their client did, by kind (logged or not)."""
        return dict.copy(self.warnings.counts)  # one C call: safe against the loop adding a kind meanwhile

    async def _accept_loop(self, listener: Listener, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        backoff = 0.0
        failures = 0
        last_logged = float("-inf")
        while True:
            try:
                sock, addr = await loop.sock_accept(listening)
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    log.warning("accept failed: %s", exc)
                    continue
                # Out of descriptors: the connection waits in the backlog. Retrying at once would spin,
                # so wait longer each time; existing connections are served meanwhile.
                failures += 1
                backoff = min(max(backoff * 2, _ACCEPT_BACKOFF_MIN), _ACCEPT_BACKOFF_MAX)
                now = time.monotonic()
                if now - last_logged >= _ACCEPT_LOG_INTERVAL:
                    log.error("accept failed %d time(s): %s; retrying every %.2fs at most while it lasts",
                              failures, exc, _ACCEPT_BACKOFF_MAX)
                    last_logged, failures = now, 0
                await asyncio.sleep(backoff)
                continue
            if backoff:
                log.info("accepting connections again")
                backoff, failures, last_logged = 0.0, 0, float("-inf")
            address = addr[0]
            refused = self.quotas.try_open(address)
            if refused is not None and self.quotas.at_max_connections:
                refused = self._make_room_for(address, refused)
            if refused is not None:
                self.warnings.warn(address, "refused_connection", "refused connection from %s:%s: %s", address,
                                   addr[1], refused)
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(sock, f"{address}:{addr[1]}", address, self._handler, self._max_request_bytes,
                                     self.memory_pool, self._use_sendfile, self.quotas, listener,
                                     self._handshake_seconds)
            if listener.authenticator is not None:
                connection.session.authenticator = listener.authenticator(connection.session, self._handler)
            task = loop.create_task(self._serve(connection))
            self.connections[task] = connection
            self.connections_created += 1
            task.add_done_callback(self.connections.pop)

    def _make_room_for(self, address: str, refused: str) -> str | None:
        """At max.connections: close the least recently active connection of the address holding the most, if
        ``address`` holds fewer (then count the new one and return None); otherwise return why it is refused."""
        busiest = self.quotas.busiest_address()
        if busiest is None or self.quotas.count(address) + 1 >= self.quotas.count(busiest):
            return refused
        candidates = [(c.last_active, task, c) for task, c in self.connections.items()
                      if c.address == busiest and not c.gone and not c.awaiting_handler]
        if not candidates:
            return refused
        _, task, victim = min(candidates, key=lambda entry: entry[0])
        self.warnings.warn(busiest, "evicted_connection",
                           "closing connection from %s to make room for one from %s: max.connections (%d) reached "
                           "and %s holds the most", victim.peer, address, self.quotas.max_connections, busiest)
        victim.release_quota()
        task.cancel()
        return self.quotas.try_open(address)

    async def _serve(self, connection: _Connection) -> None:
        peer = connection.peer
        try:
            await connection.run()
        except TlsHandshakeFailed as exc:
            listener = connection.session.listener_name
            self.warnings.warn(connection.address, FAILED_AUTHENTICATION, "TLS handshake with %s on listener %s "
                               "failed: %s", peer, listener, exc)
            if self.authentication_stats is not None:
                self.authentication_stats.count(self.authentication_stats.failed, listener, "SSL")
        except (ConnectionError, TimeoutError) as exc:
            log.debug("connection %s ended: %s", peer, exc)
        except CloseConnection as exc:
            self.warnings.warn(connection.address, exc.kind, "closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.warnings.warn(connection.address, "handler_error", "closing connection from %s after an unexpected "
                               "error", peer, exc_info=True)
        finally:
            if connection.gone is not None:
                log.debug("connection %s ended: %s", peer, connection.gone)
            if connection.closed_mid_frame:
                self.warnings.warn(connection.address, "closed_mid_frame",
                                   "connection from %s closed in the middle of a frame (%d bytes unread)", peer,
                                   connection.closed_mid_frame)
            self.connections_closed += 1
            connection.close_socket()
            connection.release()

    async def _scan(self, idle_seconds: float | None, partial_seconds: float | None) -> None:
        """Every few seconds: close connections silent for longer than connections.max.idle.ms, or silent for
        longer than socket.request.read.timeout.ms in the middle of a frame, give the buffers of quiet connections
        back, and log the counts of warnings held back."""
        interval = min([_SCAN_MAX_INTERVAL, *(limit / 4 for limit in (idle_seconds, partial_seconds) if limit)])
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for task, connection in list(self.connections.items()):
                if connection.gone is not None:
                    continue
                silent = now - connection.last_active
                authenticator = connection.session.authenticator
                if authenticator is not None and authenticator.timed_out(now):
                    self.warnings.warn(connection.address, "authentication_timeout",
                                       "closing connection from %s: SASL authentication did not complete in time",
                                       connection.peer)
                    task.cancel()
                elif idle_seconds is not None and silent > idle_seconds and not connection.awaiting_handler:
                    log.info("closing connection from %s: idle for %.0f ms (connections.max.idle.ms %.0f)",
                             connection.peer, silent * 1000, idle_seconds * 1000)
                    task.cancel()
                elif (partial_seconds is not None and silent > partial_seconds and connection.waiting_for_data
                      and connection.buffer.unread):
                    self.warnings.warn(connection.address, "request_read_timeout",
                                       "closing connection from %s: %d bytes of a request and nothing more for %.0f ms "
                                       "(socket.request.read.timeout.ms %.0f)", connection.peer, connection.buffer.unread,
                                       silent * 1000, partial_seconds * 1000)
                    task.cancel()
                elif silent > interval and connection.waiting_for_data:
                    connection.buffer.release_idle()
                    if connection.tls is not None:
                        connection.tls.release_buffers()
                elif connection.awaiting_handler and not connection.watching_socket:
                    connection.check_client_gone()
            self.warnings.flush()


async def _cancel(tasks: list[asyncio.Task]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        try:
            await task
        except asyncio.CancelledError:
            pass


class _Connection:
    """One client connection: frame reading, in-order handling and response writing."""

    def __init__(self, sock: socket.socket, peer: str, address: str, handler: Handler, max_request_bytes: int,
                 pool: RequestMemoryPool, use_sendfile: bool = True, quotas: ConnectionQuotas | None = None,
                 listener: Listener | None = None, handshake_seconds: float | None = None) -> None:
        self.sock = sock
        self.loop = loop = asyncio.get_running_loop()
        self.peer = peer
        self.address = address
        endpoint = listener.endpoint if listener is not None else None
        self.session = Session(peer) if endpoint is None else Session(
            peer, listener_name=endpoint.listener_name, security_protocol=endpoint.security_protocol)
        # The byte stream: the socket itself, or a TLS channel over it.
        context = listener.ssl_context if listener is not None else None
        self.tls: TlsChannel | None = None
        if context is None:
            self.recv_into = sock.recv_into
            self.sendall: Callable[[Any], Awaitable[None]] = functools.partial(loop.sock_sendall, sock)
            self.send_region: Callable[[int, int, int], Awaitable[None]] = functools.partial(
                _sendfile if use_sendfile else _read_and_send, loop, sock)
        else:
            self.tls = tls = TlsChannel(sock, context, loop, _ready)
            self.recv_into, self.sendall, self.send_region = tls.recv_into, tls.sendall, tls.send_region
        self.handshake_seconds = handshake_seconds
        self.handler = handler
        self.pool = pool
        self.quotas = quotas
        self.buffer = ReceiveBuffer(max_request_bytes)
        # Request bytes read and charged to the pool, given back as their requests are answered.
        self.charged = 0
        self.pending: list[Any] = []
        self.pending_bytes = 0
        self.last_active = time.monotonic()
        self.awaiting_handler = False
        # Whether this connection waited in _read (the loop ran others) since its last turn began.
        self.yielded = False
        self.waiting_for_data = False
        # Why the client is known to be gone (its answers are then discarded), and whether the socket was
        # given back (closed and uncounted in the quotas).
        self.gone: BaseException | None = None
        self.socket_closed = False
        # Whether a parked request watches the socket (else the periodic scan looks, see check_client_gone).
        self.watching_socket = False
        # Bytes of an incomplete frame when the client closed the connection.
        self.closed_mid_frame = 0

    def release(self) -> None:
        self._drop_pending()
        self.pool.release(self.charged, self)
        self.charged = 0

    def close_socket(self) -> None:
        """Close the socket (no reader or writer may be registered for it) and give its place in the quotas back."""
        self.release_quota()
        if not self.socket_closed:
            self.socket_closed = True
            self.sock.close()

    def release_quota(self) -> None:
        """Give the connection's place in the quotas back (once)."""
        if self.quotas is not None:
            self.quotas.close(self.address)
            self.quotas = None

    def check_client_gone(self) -> None:
        """While a request that is not parked runs (a commit being written, a produce waiting for its
        replicas): if the client closed or reset the connection, give the socket back now; the request goes
        on and its answer is discarded."""
        try:
            data = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._client_gone(exc)
            return
        if not data:
            self._client_gone(ClientGone("the client closed the connection"))

    def _client_gone(self, reason: BaseException) -> None:
        """The client left: discard what it would have been sent and give the socket back now; the requests
        already read are still executed (run() goes on with them)."""
        if self.gone is None:
            self.gone = reason
        self._drop_pending()
        self.close_socket()

    def _drop_pending(self) -> None:
        for chunk in self.pending:
            if not isinstance(chunk, (bytes, bytearray, memoryview)):
                chunk.close()
        self.pending.clear()
        self.pending_bytes = 0

    async def _handshake(self, tls: TlsChannel) -> None:
        """The TLS handshake, bounded in time; a client certificate names the session's principal."""
        try:
            async with asyncio.timeout(self.handshake_seconds):
                await tls.handshake()
        except TimeoutError:
            raise CloseConnection(f"no TLS handshake within {self.handshake_seconds * 1000:.0f} ms "
                                  "(socket.request.read.timeout.ms)", "ssl_handshake_timeout") from None
        principal = certificate_principal(tls.peer_certificate)
        if principal is not None:
            self.session.principal = principal
        self.last_active = time.monotonic()

    async def run(self) -> None:
        if self.tls is not None:
            await self._handshake(self.tls)
        buffer, handler, session = self.buffer, self.handler, self.session
        next_frame = buffer.next_frame
        handled = 0
        # Bytes of the frames answered in this turn, given back to the pool at the end of the turn.
        answered = 0
        while True:
            try:
                frame = next_frame()
            except FrameTooLarge as exc:
                raise CloseConnection(str(exc), "frame_too_large") from None
            if frame is None:
                self._answered(answered)
                answered = 0
                if self.pending:
                    await self._flush()
                if self.gone is not None:
                    return
                buffer.shrink()
                if not await self._read():
                    return
                if self.yielded:
                    handled = 0
                    self.yielded = False
                continue
            size = 4 + len(frame)
            try:
                authenticator = session.authenticator
                if authenticator is None:
                    response = handler(frame, session)
                else:
                    try:
                        response = authenticator.handle(frame)
                        if authenticator.exchanging and response is not None \
                                and not isinstance(response, (list, tuple)):
                            # A step of the exchange evaluated off the loop (PLAIN's key derivation).
                            self._answered(answered)
                            answered = 0
                            response = await self._wait_for(response)
                    except Refused as exc:
                        raise CloseConnection(str(exc), "sasl_refused") from None
                    except CloseAfterResponse as exc:
                        if exc.response and self.gone is None:
                            self._queue(exc.response)
                        await self._flush()
                        if exc.delay_s > 0 and self.gone is None:
                            await asyncio.sleep(exc.delay_s)
                        return
                if response is not None and not isinstance(response, (list, tuple)):
                    self._answered(answered)
                    answered = 0
                    response = await self._wait_for(response)
            finally:
                frame.release()
            if response and self.gone is None:
                self._queue(response)
            answered += size
            handled += 1
            if handled >= FRAMES_PER_TURN:
                # Let the other connections run before the next frames of this one.
                self._answered(answered)
                answered = handled = 0
                await asyncio.sleep(0)
            if self.pending_bytes >= _COALESCE_LIMIT:
                await self._flush()

    def _answered(self, size: int) -> None:
        """Give the bytes of answered requests back to the pool."""
        if size:
            self.charged -= size
            self.pool.release(size, self)

    async def _wait_for(self, response: Awaitable[Chunks | None] | Deferred) -> Chunks | None:
        """Run a handler's awaitable response to its end -- a parked one only until its client goes away --
        sending the responses already queued first; None if the client is gone."""
        if not isinstance(response, Deferred):
            response = Deferred(response)
        if response.parked:
            result = await self._wait_parked(response.awaitable)
        else:
            result = await self._run_to_end(response.awaitable)
        if self.gone is not None:
            return None
        return result if response.finish is None else response.finish(result)

    async def _run_to_end(self, awaitable: Awaitable[Any]) -> Any:
        try:
            if self.pending:
                await self._flush()
        except BaseException:
            _discard(awaitable)
            raise
        self.awaiting_handler = True
        try:
            return await awaitable
        finally:
            self.awaiting_handler = False
            self.last_active = time.monotonic()

    async def _wait_parked(self, awaitable: Awaitable[Any]) -> Any:
        """Wait for a parked response while watching the socket; cancel it if the client goes away."""
        task = asyncio.ensure_future(awaitable)
        try:
            if self.pending:
                await self._flush()
            if not task.done() and self.gone is None:
                self.awaiting_handler = True
                try:
                    await self._until_done_or_gone(task)
                finally:
                    self.awaiting_handler = False
                    self.last_active = time.monotonic()
            if self.gone is not None and not task.done():
                task.cancel()
            try:
                return await task
            except asyncio.CancelledError:
                if self.gone is not None and task.cancelled() and not _being_cancelled():
                    return None
                raise
        except BaseException:
            task.cancel()
            raise

    async def _until_done_or_gone(self, task: asyncio.Future) -> None:
        """Wait for ``task``, watching the socket: a client that closes or resets it is gone. A client that
        sends more (pipelining) is alive; its bytes stay unread until this request is answered."""
        loop, sock = self.loop, self.sock
        fd = sock.fileno()
        gone = loop.create_future()
        watching = True

        def readable() -> None:
            nonlocal watching
            try:
                data = sock.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                data, error = b"", exc
            else:
                error = ClientGone("the client closed the connection")
            if data:
                loop.remove_reader(fd)
                watching = False
            elif not gone.done():
                gone.set_result(error)

        loop.add_reader(fd, readable)
        self.watching_socket = True
        try:
            await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.watching_socket = False
            if watching:
                loop.remove_reader(fd)
            if not gone.done():
                gone.cancel()
        if gone.done() and not gone.cancelled():
            self._client_gone(gone.result())

    async def _read(self) -> bool:
        """Read what the socket has (waiting for it, and for room in the pool); False at end of stream."""
        while True:
            allowed = self.pool.readable(self, self.buffer.unread > 0)
            if not allowed:
                self.yielded = True
                await self.pool.wait()
                continue
            view = self.buffer.space()
            try:
                space = len(view)
                received = self.recv_into(view, min(space, allowed))
            except BlockingIOError:
                received = -1
            finally:
                view.release()
            if received > 0:
                self.buffer.advance(received, space)
                self.charged += received
                self.pool.charge(received)
                self.last_active = time.monotonic()
                return True
            if received == 0:
                self.closed_mid_frame = self.buffer.unread
                return False
            self.waiting_for_data = self.yielded = True
            try:
                await _ready(self.loop, self.sock, self.loop.add_reader, self.loop.remove_reader)
            finally:
                self.waiting_for_data = False

    def _queue(self, chunks: Chunks) -> None:
        for chunk in chunks:
            self.pending.append(chunk)
            self.pending_bytes += chunk.size if not isinstance(chunk, (bytes, bytearray, memoryview)) else len(chunk)

    async def _flush(self) -> None:
        """Send the queued responses; a client that went away meanwhile is marked gone (its requests still run)."""
        chunks, self.pending, self.pending_bytes = self.pending, [], 0
        run: list[Any] = []
        try:
            for index, chunk in enumerate(chunks):
                if isinstance(chunk, (bytes, bytearray, memoryview)):
                    run.append(chunk)
                    continue
                if run:
                    await self.sendall(b"".join(run) if len(run) > 1 else run[0])
                    run = []
                try:
                    await self.send_region(chunk.fd, chunk.position, chunk.size)
                finally:
                    chunk.close()
                    chunks[index] = b""
            if run:
                await self.sendall(b"".join(run) if len(run) > 1 else run[0])
        except OSError as exc:
            self._client_gone(exc)
        finally:
            for chunk in chunks:
                if not isinstance(chunk, (bytes, bytearray, memoryview)):
                    chunk.close()
        self.last_active = time.monotonic()


def _discard(response: Awaitable[Any]) -> None:
    """Close a handler's coroutine that will not run (the connection is being cancelled), so that it is not
    reported as never awaited; other awaitables are cancelled."""
    close = getattr(response, "close", None)
    if close is not None:
        close()
    else:
        asyncio.ensure_future(response).cancel()


def _being_cancelled() -> bool:
    """Whether the running task itself was asked to stop (as opposed to a task it waited for)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


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
            await _ready(loop, sock, loop.add_writer, loop.remove_writer)
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
        data = os.pread(fd, min(size, READ_SIZE * 4), position)
        if not data:
            raise ConnectionError(f"file region ended {size} bytes early")
        await loop.sock_sendall(sock, data)
        position += len(data)
        size -= len(data)


async def _ready(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 watch: Callable[..., Any], unwatch: Callable[[int], Any]) -> None:
    """Wait until ``sock`` is readable or writable: ``watch``/``unwatch`` are the loop's add/remove_reader or _writer."""
    future = loop.create_future()

    def ready() -> None:
        if not future.done():
            future.set_result(None)

    watch(sock.fileno(), ready)
    try:
        await future
    finally:
        unwatch(sock.fileno())
