"""Raw Kafka wire protocol for tests: framing, a blocking connection, and the few requests tests build by hand.

Tests use this where a real client cannot be made to misbehave (corrupt batches, bad frames) or would
be too slow (bulk pre-encoded Produce requests). Everything here is non-flexible (request header v1,
response header v0), which every API version the broker advertises below its first flexible version uses.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Iterable

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_VERSIONS = 18

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class ConnectionClosed(ConnectionError):
    """The broker closed the connection before a whole response frame arrived."""


class Writer:
    """Appends Kafka primitive types (big-endian ints, int16-length strings, int32-length bytes)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int8(self, value: int) -> Writer:
        self.parts.append(struct.pack(">b", value))
        return self

    def int16(self, value: int) -> Writer:
        self.parts.append(_INT16.pack(value))
        return self

    def int32(self, value: int) -> Writer:
        self.parts.append(_INT32.pack(value))
        return self

    def int64(self, value: int) -> Writer:
        self.parts.append(_INT64.pack(value))
        return self

    def string(self, value: str | None) -> Writer:
        if value is None:
            return self.int16(-1)
        data = value.encode()
        self.int16(len(data))
        self.parts.append(data)
        return self

    def bytes_(self, value: bytes | bytearray | memoryview | None) -> Writer:
        if value is None:
            return self.int32(-1)
        self.int32(len(value))
        self.parts.append(bytes(value))
        return self

    def array_len(self, count: int) -> Writer:
        return self.int32(count)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    """Reads Kafka primitive types from a response body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return value

    def int16(self) -> int:
        return self._take(_INT16)

    def int32(self) -> int:
        return self._take(_INT32)

    def int64(self) -> int:
        return self._take(_INT64)

    def string(self) -> str | None:
        length = self.int16()
        if length < 0:
            return None
        value = self.data[self.pos : self.pos + length].decode()
        self.pos += length
        return value

    def bytes_(self) -> bytes | None:
        length = self.int32()
        if length < 0:
            return None
        value = self.data[self.pos : self.pos + length]
        self.pos += length
        return value

    def remaining(self) -> int:
        return len(self.data) - self.pos


def encode_request(api_key: int, api_version: int, correlation_id: int, body: bytes, client_id: str = "test-harness") -> bytes:
    """A whole size-prefixed request frame with request header v1."""
    header = Writer().int16(api_key).int16(api_version).int32(correlation_id).string(client_id).getvalue()
    return _INT32.pack(len(header) + len(body)) + header + body


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Read exactly ``size`` bytes or raise ConnectionClosed."""
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ConnectionClosed(f"connection closed after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


def read_frame(sock: socket.socket) -> bytes:
    """Read one size-prefixed frame and return its payload (without the size)."""
    (size,) = _INT32.unpack(recv_exact(sock, 4))
    return recv_exact(sock, size)


class KafkaConnection:
    """A blocking connection to one broker that sends requests and reads their responses in order."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, client_id: str = "test-harness") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self._next_correlation_id = 1

    def send(self, api_key: int, api_version: int, body: bytes) -> int:
        """Send one request; return its correlation id."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        self.sock.sendall(encode_request(api_key, api_version, correlation_id, body, self.client_id))
        return correlation_id

    def receive(self, correlation_id: int) -> Reader:
        """Read the next response, check it answers ``correlation_id``, return a Reader on its body."""
        frame = read_frame(self.sock)
        (got,) = _INT32.unpack_from(frame, 0)
        if got != correlation_id:
            raise AssertionError(f"response correlation id {got}, expected {correlation_id}")
        reader = Reader(frame)
        reader.pos = 4
        return reader

    def request(self, api_key: int, api_version: int, body: bytes) -> Reader:
        """Send one request and wait for its response."""
        return self.receive(self.send(api_key, api_version, body))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def api_versions(conn: KafkaConnection) -> dict[int, tuple[int, int]]:
    """ApiVersions v0: {api_key: (min_version, max_version)}; raises if the broker reports an error."""
    reader = conn.request(API_VERSIONS, 0, b"")
    error_code = reader.int16()
    if error_code != 0:
        raise AssertionError(f"ApiVersions v0 answered error code {error_code}")
    versions = {}
    for _ in range(reader.int32()):
        key, low, high = reader.int16(), reader.int16(), reader.int16()
        versions[key] = (low, high)
    return versions


@dataclass
class PartitionProduceResult:
    """One partition's entry in a Produce response."""

    topic: str
    partition: int
    error_code: int
    base_offset: int


def produce_request_body(
    topic: str,
    partition_records: Iterable[tuple[int, bytes]],
    acks: int = 1,
    timeout_ms: int = 30000,
) -> bytes:
    """Produce v3 request body for one topic: (partition, RecordBatch bytes) pairs."""
    partitions = list(partition_records)
    writer = Writer().string(None).int16(acks).int32(timeout_ms).array_len(1).string(topic).array_len(len(partitions))
    for partition, records in partitions:
        writer.int32(partition).bytes_(records)
    return writer.getvalue()


def parse_produce_response(reader: Reader) -> list[PartitionProduceResult]:
    """Decode a Produce v3 response body (v2+ layout: log append time, then throttle time at the end)."""
    results = []
    for _ in range(reader.int32()):
        topic = reader.string() or ""
        for _ in range(reader.int32()):
            partition = reader.int32()
            error_code = reader.int16()
            base_offset = reader.int64()
            reader.int64()  # log_append_time
            results.append(PartitionProduceResult(topic, partition, error_code, base_offset))
    return results


def produce(conn: KafkaConnection, topic: str, partition: int, records: bytes, acks: int = 1) -> PartitionProduceResult:
    """Send one Produce v3 request with one batch for one partition and return that partition's result.

    acks=0 requests get no response; send those with ``conn.send`` instead.
    """
    if acks == 0:
        raise ValueError("a Produce request with acks=0 has no response; use conn.send")
    reader = conn.request(API_PRODUCE, 3, produce_request_body(topic, [(partition, records)], acks=acks))
    (result,) = parse_produce_response(reader)
    return result


@dataclass
class PartitionFetchResult:
    """One partition's entry in a Fetch response."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    records: bytes


def fetch_request_body(topic: str, partition: int, offset: int, max_wait_ms: int, min_bytes: int = 1,
                       max_bytes: int = 1 << 20) -> bytes:
    """Fetch v4 request body for one partition (read_uncommitted)."""
    return (
        Writer().int32(-1).int32(max_wait_ms).int32(min_bytes).int32(max_bytes).int8(0)
        .array_len(1).string(topic).array_len(1).int32(partition).int64(offset).int32(max_bytes)
        .getvalue()
    )


def parse_fetch_response(reader: Reader) -> list[PartitionFetchResult]:
    """Decode a Fetch v4 response body."""
    reader.int32()  # throttle_time_ms
    results = []
    for _ in range(reader.int32()):
        topic = reader.string() or ""
        for _ in range(reader.int32()):
            partition = reader.int32()
            error_code = reader.int16()
            high_watermark = reader.int64()
            reader.int64()  # last_stable_offset
            aborted = reader.int32()
            for _ in range(max(aborted, 0)):
                reader.int64()
                reader.int64()
            records = reader.bytes_() or b""
            results.append(PartitionFetchResult(topic, partition, error_code, high_watermark, records))
    return results


def fetch(conn: KafkaConnection, topic: str, partition: int, offset: int, max_wait_ms: int, min_bytes: int = 1) -> PartitionFetchResult:
    """Send one Fetch v4 request for one partition and return its result."""
    reader = conn.request(API_FETCH, 4, fetch_request_body(topic, partition, offset, max_wait_ms, min_bytes))
    (result,) = parse_fetch_response(reader)
    return result
