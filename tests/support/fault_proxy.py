"""A TCP proxy in front of one broker that can lose Produce responses, to make a producer retry.

The proxy forwards Kafka frames both ways. Armed with :meth:`FaultProxy.lose_produce_responses`, it lets the
chosen Produce requests reach the broker (which stores them) but, when their response comes back, closes the
client's connection instead of passing the response on: the client cannot tell whether the request was
stored and retries it. :meth:`FaultProxy.lose_produce_requests` closes the connection instead of forwarding
the request, so the broker never stores it. Run the broker on another loopback address with ``advertised.host.name`` set to the
proxy's, on the same port, so that every connection a client opens goes through the proxy.
"""

from __future__ import annotations

import socket
import struct
import threading

__all__ = ["FaultProxy"]

_LENGTH = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_PRODUCE = 0


def _read_frame(sock: socket.socket) -> bytes | None:
    """One length-prefixed frame with its prefix, or None at end of stream."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    body = _read_exactly(sock, _LENGTH.unpack(head)[0])
    return None if body is None else head + body


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    parts = []
    while size:
        try:
            chunk = sock.recv(size)
        except OSError:
            return None
        if not chunk:
            return None
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


class FaultProxy:
    """Forwards ``listen_host:port`` to ``target_host:port``; loses Produce responses on request."""

    def __init__(self, listen_host: str, target_host: str, port: int) -> None:
        self.target = (target_host, port)
        self._lock = threading.Lock()
        self._skip = 0
        self._lose = 0
        self._lose_requests = False
        self.lost_requests = 0
        self.lost_responses = 0
        self.produce_requests = 0
        self.most_produce_in_flight = 0  # most Produce requests one connection had unanswered at once
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._listener = socket.create_server((listen_host, port))
        self.address = f"{listen_host}:{port}"
        self._start(self._accept)

    def lose_produce_responses(self, count: int = 1, *, after: int = 0) -> None:
        """Lose the responses of the next ``count`` Produce requests, after letting ``after`` through."""
        with self._lock:
            self._skip = after
            self._lose = count
            self._lose_requests = False

    def lose_produce_requests(self, count: int = 1, *, after: int = 0) -> None:
        """Lose the next ``count`` Produce requests themselves (the broker never sees them), after ``after``."""
        with self._lock:
            self._skip = after
            self._lose = count
            self._lose_requests = True

    def _start(self, target, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            doomed: set[int] = set()  # correlation ids of Produce requests whose response is lost
            in_flight: set[int] = set()  # correlation ids of Produce requests not answered yet
            self._start(self._requests, client, upstream, doomed, in_flight)
            self._start(self._responses, upstream, client, doomed, in_flight)

    def _requests(self, client: socket.socket, upstream: socket.socket, doomed: set[int], in_flight: set[int]
                  ) -> None:
        while (frame := _read_frame(client)) is not None:
            api_key, _, correlation_id = _REQUEST_HEAD.unpack_from(frame, 4)
            if api_key == _PRODUCE:
                with self._lock:
                    self.produce_requests += 1
                    in_flight.add(correlation_id)
                    self.most_produce_in_flight = max(self.most_produce_in_flight, len(in_flight))
                    lose_request = False
                    if self._skip:
                        self._skip -= 1
                    elif self._lose:
                        self._lose -= 1
                        lose_request = self._lose_requests
                        if lose_request:
                            self.lost_requests += 1
                        else:
                            doomed.add(correlation_id)
                if lose_request:
                    break
            try:
                upstream.sendall(frame)
            except OSError:
                break
        self._close_pair(client, upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket, doomed: set[int], in_flight: set[int]
                   ) -> None:
        while (frame := _read_frame(upstream)) is not None:
            (correlation_id,) = _LENGTH.unpack_from(frame, 4)
            with self._lock:
                in_flight.discard(correlation_id)
                lose = correlation_id in doomed
                if lose:
                    self.lost_responses += 1
            if lose:
                break
            try:
                client.sendall(frame)
            except OSError:
                break
        self._close_pair(client, upstream)

    @staticmethod
    def _close_pair(*sockets: socket.socket) -> None:
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already shut down by the other direction's thread
            sock.close()

    def close(self) -> None:
        """Stop accepting, close every connection, and wait for the forwarding threads."""
        with self._lock:
            self._closed = True
            sockets, threads = list(self._sockets), list(self._threads)
        self._close_pair(self._listener, *sockets)
        for thread in threads:
            thread.join(5)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
