"""BrokerConnection: one blocking TCP connection to a broker, with version negotiation and pipelining.

On connect it asks ApiVersions (answering a v0 "unsupported version" reply by retrying at the broker's
version, and an answer it cannot decode by retrying at v0, as librdkafka does) and then uses, for each API, the highest version both sides speak. Requests may be pipelined:
``send`` queues a request and returns its correlation id; ``receive`` returns the next response, which
the broker sends in request order. Any socket failure closes the connection and raises
KafkaConnectionError (retriable); the owner reconnects. On SASL_PLAINTEXT and SASL_SSL the connection logs in
after ApiVersions (pipeline.client.sasl_client) and again, on the same socket, when most of the session
lifetime the broker gave has passed; a refused login raises AuthenticationError (not retriable).
"""

from __future__ import annotations

import collections
import socket
import ssl
import struct
import threading
import time
from typing import Any

from pipeline.client.errors import KafkaConnectionError, UnsupportedVersionError
from pipeline.client.sasl_client import authenticate
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import SUPPORTED_VERSIONS, ProtocolError, decode_response, encode_request
from pipeline.protocol.errors import ErrorCode
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity

_LENGTH = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
# Bigger responses than this are refused as corrupt rather than allocated.
MAX_RESPONSE_BYTES = 1 << 30
# Share of the SASL session lifetime after which the connection logs in again (Kafka's clients: 85-95%).
REAUTHENTICATE_AT = 0.85


class BrokerConnection:
    """A connection to one broker; not thread-safe (one owner at a time)."""

    def __init__(self, host: str, port: int, *, client_id: str = "pipeline", timeout_s: float = 30.0,
                 node_id: int = -1, send_buffer_bytes: int | None = None,
                 receive_buffer_bytes: int | None = None, security: ClientSecurity = PLAINTEXT_SECURITY) -> None:
        self.host = host
        self.security = security
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        self._sock: socket.socket | None = None
        self._correlation = 0
        # (correlation id, api key, version) of requests whose responses have not been read yet.
        self._in_flight: collections.deque[tuple[int, int, int]] = collections.deque()
        # request() is a send and its answer; threads sharing a pooled connection take turns (pipelined
        # send()/receive() is one thread's, as a producer's sender uses it).
        self._request_lock = threading.Lock()
        self.versions: dict[int, int] = {}
        self.broker_versions: dict[int, tuple[int, int]] = {}
        # When to log in again (time.monotonic()), for a SASL session with a lifetime.
        self._reauthenticate_at: float | None = None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node {self.node_id})"

    @property
    def connected(self) -> bool:
        """Whether the socket is open (a failure closes it; ``connect()`` opens it again)."""
        return self._sock is not None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def connect(self) -> None:
        """Open the socket and negotiate API versions; a no-op when already connected."""
        if self._sock is not None:
            return
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to broker {self.host}:{self.port}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.security.uses_ssl:
            sock = self._wrap_tls(sock)
        if self._send_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer_bytes)
        if self._receive_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer_bytes)
        self._sock = sock
        self._in_flight.clear()
        try:
            self._negotiate()
            if self.security.uses_sasl:
                self._authenticate()
        except BaseException:
            self.close()
            raise

    def _authenticate(self) -> None:
        """The SASL login (again, for a reauthentication); remembers when the next one is due."""
        self._reauthenticate_at = None
        started = time.monotonic()

        def request(api_key: int, body: dict, version: int) -> dict:
            self.send(api_key, body, version=version)
            return self.receive()[1]
        version = min(self.versions.get(ApiKey.SASL_AUTHENTICATE, 0), 2)
        if ApiKey.SASL_HANDSHAKE not in self.versions:
            raise KafkaConnectionError(f"broker {self.host}:{self.port} does not speak SaslHandshake v1")
        lifetime_ms = authenticate(request, self.security, version, f"{self.host}:{self.port}")
        if lifetime_ms > 0:
            self._reauthenticate_at = started + lifetime_ms / 1000 * REAUTHENTICATE_AT

    def _wrap_tls(self, sock: socket.socket) -> socket.socket:
        """The TLS handshake over a fresh socket, checking the broker's certificate (and its name, unless
        ssl.endpoint.identification.algorithm is none)."""
        try:
            return self.security.ssl_context().wrap_socket(sock, server_hostname=self.host)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise KafkaConnectionError(f"TLS handshake with broker {self.host}:{self.port} failed: {exc}") from None

    def _negotiate(self) -> None:
        ours = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1]
        response = self._api_versions(ours)
        if response is None or response["error_code"] == ErrorCode.UNSUPPORTED_VERSION:
            # As librdkafka does: retry at the version the broker names, or at v0 when its answer was
            # unreadable (librdkafka's mock cluster answers a newer version in a layout of its own).
            named = {} if response is None else {k["api_key"]: k["max_version"] for k in response["api_keys"]}
            response = self._api_versions(min(ours, named.get(ApiKey.API_VERSIONS, 0)))
        if response is None:
            self.close()
            raise KafkaConnectionError(f"malformed ApiVersions response from {self.host}:{self.port}")
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaConnectionError(f"broker {self.host}:{self.port} refused ApiVersions: "
                                       f"{ErrorCode(response['error_code']).name}")
        self.broker_versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]}
        self.versions = {}
        for key, (low, high) in SUPPORTED_VERSIONS.items():
            theirs = self.broker_versions.get(key)
            if theirs is not None and theirs[0] <= high and low <= theirs[1]:
                self.versions[key] = min(high, theirs[1])

    def _api_versions(self, version: int) -> dict | None:
        """One ApiVersions round trip; None when the answer cannot be decoded. A broker older than
        ``version`` answers UNSUPPORTED_VERSION in the v0 layout, so that answer is decoded as v0 (the
        response header is v0 for every version)."""
        self.send(ApiKey.API_VERSIONS, {"client_software_name": "pipeline", "client_software_version": "0.1"},
                  version=version)
        _, _, _, frame = self.receive_frame()
        if len(frame) >= 6 and _ERROR_CODE.unpack_from(frame, 4)[0] == ErrorCode.UNSUPPORTED_VERSION:
            version = 0
        try:
            return decode_response(ApiKey.API_VERSIONS, version, frame)[1]
        except ProtocolError:
            return None

    def version(self, api_key: int) -> int:
        """The version of ``api_key`` this connection uses; UnsupportedVersionError if there is none."""
        try:
            return self.versions[api_key]
        except KeyError:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} speaks no version of {ApiKey(api_key).name} that we speak") from None

    def next_correlation_id(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        return self._correlation

    def send(self, api_key: int, body: dict, *, version: int | None = None, expect_response: bool = True) -> int:
        """Send one request without waiting; returns its correlation id."""
        if self._sock is None:
            self.connect()
        if version is None:
            version = self.version(api_key)
        correlation_id = self.next_correlation_id()
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        self.send_frame(frame, api_key, version, correlation_id, expect_response)
        return correlation_id

    def send_frame(self, frame: bytes | bytearray | memoryview, api_key: int, version: int, correlation_id: int,
                   expect_response: bool = True) -> None:
        """Send a request already encoded with ``correlation_id`` (the hot path of a producer)."""
        if self._sock is None:
            raise KafkaConnectionError(f"not connected to broker {self.host}:{self.port}")
        if self._reauthenticate_at is not None and not self._in_flight and time.monotonic() >= self._reauthenticate_at:
            self._reauthenticate()
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise KafkaConnectionError(f"sending to broker {self.host}:{self.port} failed: {exc}") from None
        if expect_response:
            self._in_flight.append((correlation_id, api_key, version))

    def _reauthenticate(self) -> None:
        try:
            self._authenticate()
        except BaseException:
            self.close()
            raise

    def receive(self) -> tuple[int, dict]:
        """Read and decode the response to the oldest request in flight: (correlation id, body)."""
        correlation_id, api_key, version, frame = self.receive_frame()
        try:
            _, body = decode_response(api_key, version, frame)
        except ProtocolError as exc:
            self.close()
            raise KafkaConnectionError(f"malformed {ApiKey(api_key).name} response from "
                                       f"{self.host}:{self.port}: {exc}") from None
        return correlation_id, body

    def receive_frame(self) -> tuple[int, int, int, memoryview]:
        """Read the next response frame without decoding it: (correlation id, api key, version, frame)."""
        if self._sock is None or not self._in_flight:
            raise KafkaConnectionError(f"no request in flight to broker {self.host}:{self.port}")
        expected, api_key, version = self._in_flight[0]
        (length,) = _LENGTH.unpack(self._read_exactly(4))
        if not 4 <= length <= MAX_RESPONSE_BYTES:
            self.close()
            raise KafkaConnectionError(f"broker {self.host}:{self.port} sent a frame of {length} bytes")
        frame = self._read_exactly(length)
        (correlation_id,) = _CORRELATION.unpack_from(frame)
        if correlation_id != expected:
            self.close()
            raise KafkaConnectionError(f"broker {self.host}:{self.port} answered correlation id {correlation_id}, "
                                       f"expected {expected}")
        self._in_flight.popleft()
        return correlation_id, api_key, version, frame

    def request(self, api_key: int, body: dict, *, version: int | None = None) -> dict:
        """Send one request and return its response body (earlier responses in flight must be read first).

        Safe to call from several threads: each gets its own answer."""
        with self._request_lock:
            if self._in_flight:
                raise KafkaConnectionError("request() called while pipelined responses are still unread")
            self.send(api_key, body, version=version)
            return self.receive()[1]

    def _read_exactly(self, size: int) -> memoryview:
        assert self._sock is not None
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        try:
            while got < size:
                n = self._sock.recv_into(view[got:])
                if n == 0:
                    raise OSError("connection closed by the broker")
                got += n
        except OSError as exc:
            self.close()
            raise KafkaConnectionError(f"reading from broker {self.host}:{self.port} failed: {exc}"
                                       f"{_tls_refusal_hint(exc)}") from None
        return view

    def set_timeout(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        if self._sock is not None:
            self._sock.settimeout(timeout_s)

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._in_flight.clear()

    def __enter__(self) -> "BrokerConnection":
        self.connect()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _tls_refusal_hint(exc: OSError) -> str:
    """What to check when a TLS 1.3 broker refuses the client's certificate: the refusal arrives as an alert at the
    client's first read, after its side of the handshake looked done."""
    reason = getattr(exc, "reason", None) or ""
    if isinstance(exc, ssl.SSLError) and ("CERTIFICATE" in reason or "UNKNOWN_CA" in reason):
        return (" (the broker refused this client's certificate, or its absence: check ssl.certificate.location "
                "and ssl.key.location against the broker's ssl.client.auth and truststore)")
    return ""
