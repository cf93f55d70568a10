"""SimpleConsumer: the paper's low-level, stateless consumer of one broker -- fetch, multifetch, offsets.

The caller says where to read (topic, partition, offset, how many bytes) and gets the messages back;
nothing is remembered between calls. ``multifetch`` serves many partitions in ONE Fetch request, and
``get_offsets_before`` is the paper's getOffsetsBefore over ListOffsets (v0, the paper-era form that
returns several offsets, when the broker speaks it).

The fetch path is shared with the following :class:`pipeline.client.consumer.Consumer`:
``fetch_request_body`` builds a Fetch request for many partitions and ``read_message_set`` turns one
partition of a Fetch response into a :class:`MessageSet` (CRC-checked, decompressed, records before the
requested offset and a trailing partial batch left out).
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import KafkaClientError, KafkaConnectionError, OffsetOutOfRange
from pipeline.client.isolation import READ_COMMITTED, READ_UNCOMMITTED, committed_batches, parse_isolation_level
from pipeline.protocol.api_keys import ApiKey
from pipeline.records.batch import CONTROL_FLAG, BatchHeader, iter_batches
from pipeline.protocol.codec import SUPPORTED_VERSIONS
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.records import Record, decode_batch
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity

__all__ = [
    "EARLIEST_TIME",
    "LATEST_TIME",
    "FetchRequest",
    "MessageSet",
    "MessageSizeTooLarge",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "batch_records",
    "SimpleConsumer",
    "fetch_request_body",
    "list_offsets",
    "read_message_set",
]

# The special times of getOffsetsBefore / ListOffsets.
LATEST_TIME = -1
EARLIEST_TIME = -2

MAX_INT32 = 0x7FFFFFFF
Buffer = bytes | bytearray | memoryview
DEFAULT_BUFFER_SIZE = 1024 * 1024
DEFAULT_MAX_BUFFER_SIZE = 50 * 1024 * 1024


class MessageSizeTooLarge(KafkaClientError):
    """A partition's next batch does not fit even in the largest fetch size the consumer may use."""

    def __init__(self, topic: str, partition: int, offset: int, max_bytes: int) -> None:
        super().__init__(f"the batch at offset {offset} of {topic}-{partition} is larger than the "
                         f"largest fetch size of {max_bytes} bytes; raise the maximum fetch size")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.max_bytes = max_bytes


class FetchRequest(NamedTuple):
    """Where to read: the paper's FetchRequest(topic, partition, offset, maxSize).

    ``max_bytes`` None means the consumer's default fetch size (its ``buffer_size``).
    """

    topic: str
    partition: int
    offset: int
    max_bytes: int | None = None


class MessageSet:
    """The messages one fetch returned for one partition (the paper's ByteBufferMessageSet).

    Iterating yields :class:`pipeline.records.Record` items (offset, timestamp, key, value,
    headers) in offset order, decoding one batch at a time from the response bytes (so only a batch's
    records are alive at once); ``messages`` decodes them all into a list. ``next_offset`` is where
    the next fetch of this partition starts; ``high_watermark`` and ``log_start_offset`` are the
    partition's bounds as the broker reported them. ``truncated`` says the response held only part of
    one batch (the fetch size was too small for it). A set whose partition failed carries the
    exception in ``error`` and raises it when iterated. ``last_stable_offset`` is the partition's LSO as a
    Fetch v4+ answer gives it (-1 when unknown): a read_committed fetch reads no further.
    """

    __slots__ = ("topic", "partition", "offset", "data", "batches", "next_offset", "high_watermark",
                 "log_start_offset", "truncated", "error", "last_stable_offset", "_messages")

    def __init__(self, topic: str, partition: int, offset: int, data: Buffer = b"",
                 batches: list[tuple[int, BatchHeader]] | None = None, next_offset: int | None = None,
                 high_watermark: int = -1, log_start_offset: int = -1, truncated: bool = False,
                 error: Exception | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.data = data
        # (position in data, header) of the CRC-checked batches holding records at offset and after.
        self.batches = batches if batches is not None else []
        self.next_offset = offset if next_offset is None else next_offset
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset
        self.truncated = truncated
        self.error = error
        self.last_stable_offset = -1
        self._messages: list[Record] | None = None

    def __iter__(self) -> Iterator[Record]:
        if self.error is not None:
            raise self.error
        if self._messages is not None:
            return iter(self._messages)
        return self._decode()

    def _decode(self) -> Iterator[Record]:
        for records in self.record_batches():
            yield from records

    def record_batches(self) -> Iterator[list[Record]]:
        """The records one record batch at a time (each decoded when asked for); raises the fetch's error."""
        if self.error is not None:
            raise self.error
        if self._messages is not None:
            yield self._messages
            return
        data = self.data
        offset = self.offset
        for pos, header in self.batches:
            yield batch_records(data, pos, header, offset)

    @property
    def messages(self) -> list[Record]:
        """All the messages as one list (decoded on first use)."""
        if self._messages is None:
            if self.error is not None:
                raise self.error
            self._messages = list(self._decode())
        return self._messages

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        state = f"error={self.error!r}" if self.error is not None else f"{len(self.batches)} batches"
        return (f"MessageSet({self.topic}-{self.partition} from {self.offset}: {state}, "
                f"next_offset={self.next_offset}, high_watermark={self.high_watermark})")


def batch_records(data: Buffer, pos: int, header: BatchHeader, offset: int) -> list[Record]:
    """The records at ``offset`` and after of the (already CRC-checked) batch at ``pos`` in ``data``."""
    records = decode_batch(data, pos, check_crc=False)[1]
    if header.base_offset < offset:
        records = [r for r in records if r.offset >= offset]
    return records


def fetch_request_body(requests: Sequence[FetchRequest], *, max_wait_ms: int = 0, min_bytes: int = 0,
                       max_bytes: int | None = None, isolation_level: int = READ_UNCOMMITTED) -> dict:
    """A Fetch request body asking for every partition of ``requests`` (their max_bytes must be set).

    Partitions of one topic are grouped under it, in the order they first appear. ``max_bytes`` caps
    the whole response (default: the sum of the partitions' sizes). ``isolation_level`` 1 (read_committed)
    reads up to the last stable offset.
    """
    topics: dict[str, list[dict]] = {}
    total = 0
    for request in requests:
        size = request.max_bytes
        if size is None or size <= 0:
            raise ValueError(f"fetch size of {request.topic}-{request.partition} must be positive, got {size}")
        total += size
        topics.setdefault(request.topic, []).append({
            "partition": request.partition, "current_leader_epoch": -1, "fetch_offset": request.offset,
            "log_start_offset": -1, "partition_max_bytes": size})
    return {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
        "max_bytes": min(total if max_bytes is None else max_bytes, MAX_INT32),
        "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()],
        "forgotten_topics_data": [], "rack_id": "",
    }


def partitions_by_key(response: dict) -> dict[tuple[str, int], dict]:
    """The partitions of a Fetch response, keyed by (topic, partition)."""
    if response.get("error_code"):
        raise KafkaProtocolError(response["error_code"], "the broker refused the whole fetch")
    return {(topic["topic"], part["partition_index"]): part
            for topic in response["responses"] for part in topic["partitions"]}


def read_message_set(topic: str, partition: int, offset: int, part: dict | None,
                     isolation_level: int = READ_UNCOMMITTED) -> MessageSet:
    """Turn one partition of a Fetch response into a MessageSet of the records at ``offset`` and after.

    Every whole batch's CRC-32C is checked (CorruptBatchError is raised, never skipped); compressed
    batches are decompressed; control batches are left out, and with ``isolation_level`` read_committed the
    batches of the aborted transactions the response names too (:mod:`pipeline.client.isolation`); a trailing
    partial batch is ignored and fetched next time. Records are decoded when the set is iterated. A broker
    error becomes the set's ``error`` (OffsetOutOfRange with the bounds).
    """
    if part is None:
        error = KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"the fetch response has no entry for {topic}-{partition}")
        return MessageSet(topic, partition, offset, error=error)
    high_watermark = part["high_watermark"]
    log_start_offset = part.get("log_start_offset", -1)
    code = part["error_code"]
    if code:
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            error: Exception = OffsetOutOfRange(topic, partition, offset, log_start_offset, high_watermark)
        else:
            error = KafkaProtocolError(code, f"fetch of {topic}-{partition} at offset {offset}")
        return MessageSet(topic, partition, offset, high_watermark=high_watermark,
                          log_start_offset=log_start_offset, error=error)
    data = part["records"]
    if not data:
        result = MessageSet(topic, partition, offset, b"", [], offset, high_watermark, log_start_offset)
        result.last_stable_offset = part.get("last_stable_offset", -1)
        return result
    if isolation_level and part.get("aborted_transactions"):
        batches, next_offset, whole = committed_batches(data, offset, part["aborted_transactions"])
        result = MessageSet(topic, partition, offset, data, batches, next_offset, high_watermark, log_start_offset,
                            truncated=not whole)
        result.last_stable_offset = part.get("last_stable_offset", -1)
        return result
    batches = []
    next_offset = offset
    whole = False
    for pos, header in iter_batches(data, True):
        whole = True
        last = header.base_offset + header.last_offset_delta
        if last < offset:
            continue
        next_offset = last + 1
        if not header.attributes & CONTROL_FLAG:
            batches.append((pos, header))
    result = MessageSet(topic, partition, offset, data, batches, next_offset, high_watermark, log_start_offset,
                        truncated=not whole)
    result.last_stable_offset = part.get("last_stable_offset", -1)
    return result


def list_offsets(connection: BrokerConnection, topic: str, partition: int, time: int,
                 max_num_offsets: int = 1, isolation_level: int = READ_UNCOMMITTED) -> list[int]:
    """ListOffsets for one partition on ``connection``: offsets before ``time``, newest first.

    Uses version 0 (several offsets: the segment base offsets older than ``time``, led by the log end
    for -1) when the broker speaks it; otherwise the newest version, which answers one offset (for a
    timestamp: the first offset whose timestamp is at least ``time``). With ``isolation_level``
    read_committed (v2+, which has it) the latest offset is the last stable offset.
    """
    connection.connect()
    broker = connection.broker_versions.get(ApiKey.LIST_OFFSETS)
    ours = SUPPORTED_VERSIONS.get(ApiKey.LIST_OFFSETS)
    legacy = not isolation_level and broker is not None and ours is not None and broker[0] == 0 and ours[0] == 0
    version = 0 if legacy else connection.version(ApiKey.LIST_OFFSETS)
    body = {"replica_id": -1, "isolation_level": isolation_level, "timeout_ms": 30000, "topics": [{
        "name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                       "timestamp": time, "max_num_offsets": max_num_offsets}]}]}
    response = connection.request(ApiKey.LIST_OFFSETS, body, version=version)
    parts = [p for t in response["topics"] if t["name"] == topic for p in t["partitions"]
             if p["partition_index"] == partition]
    if not parts:
        raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"the ListOffsets response has no entry for {topic}-{partition}")
    part = parts[0]
    if part["error_code"]:
        raise KafkaProtocolError(part["error_code"], f"ListOffsets of {topic}-{partition} at time {time}")
    if version == 0:
        offsets = list(part["old_style_offsets"])
    else:
        offsets = [part["offset"]] if part["offset"] >= 0 else []
    offsets.sort(reverse=True)
    return offsets[:max_num_offsets]


class SimpleConsumer:
    """The paper's stateless consumer of one broker (the leader of the partitions it reads).

    ``timeout`` is the socket timeout in seconds; ``buffer_size`` the fetch size in bytes of requests
    that give none; ``max_buffer_size`` the ceiling up to which a fetch size is doubled when a
    partition's next batch does not fit (past it, MessageSizeTooLarge). A broken connection is
    reopened once and the request repeated (fetches and offset queries have no side effects). ``security``: how
    to connect (TLS, SASL), as every client of the project takes it. ``isolation_level``: read_uncommitted (0,
    the default) or read_committed (1: up to the last stable offset, without aborted transactions), for every
    call unless a call names its own.
    """

    def __init__(self, host: str, port: int, *, timeout: float = 30.0, buffer_size: int = DEFAULT_BUFFER_SIZE,
                 max_buffer_size: int = DEFAULT_MAX_BUFFER_SIZE, client_id: str = "pipeline-simple-consumer",
                 receive_buffer_bytes: int | None = None,
                 connection: BrokerConnection | None = None, security: ClientSecurity = PLAINTEXT_SECURITY,
                 isolation_level: int | str = READ_UNCOMMITTED) -> None:
        if buffer_size <= 0 or max_buffer_size < buffer_size:
            raise ValueError(f"need 0 < buffer_size <= max_buffer_size, got {buffer_size} and {max_buffer_size}")
        self.host = host
        self.port = port
        self.buffer_size = buffer_size
        self.max_buffer_size = max_buffer_size
        self.client_id = client_id
        self.isolation_level = parse_isolation_level(isolation_level)
        self._connection = connection if connection is not None else BrokerConnection(
            host, port, client_id=client_id, timeout_s=timeout, receive_buffer_bytes=receive_buffer_bytes,
            security=security)

    @property
    def connection(self) -> BrokerConnection:
        return self._connection

    def fetch(self, request: FetchRequest, *, max_wait_ms: int = 0, min_bytes: int = 0,
              isolation_level: int | str | None = None) -> MessageSet:
        """The messages of one partition from ``request.offset`` on; raises the partition's error if any."""
        (result,) = self.multifetch([request], max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                    isolation_level=isolation_level)
        if result.error is not None:
            raise result.error
        return result

    def multifetch(self, requests: Sequence[FetchRequest], *, max_wait_ms: int = 0,
                   min_bytes: int = 0, isolation_level: int | str | None = None) -> list[MessageSet]:
        """Fetch many partitions in one Fetch request; the MessageSets come back in request order.

        A partition's broker error is kept in its set's ``error`` (raised when the set is iterated),
        so one failing partition does not hide the data of the others. Partitions whose next batch
        exceeded their fetch size are fetched again with doubled sizes, up to ``max_buffer_size``.
        """
        if len({(r.topic, r.partition) for r in requests}) != len(requests):
            raise ValueError("multifetch was given the same partition twice")
        level = self.isolation_level if isolation_level is None else parse_isolation_level(isolation_level)
        sized = [r if r.max_bytes is not None else r._replace(max_bytes=self.buffer_size) for r in requests]
        results = self._fetch_once(sized, max_wait_ms, min_bytes, level)
        while True:
            retry = [i for i, result in enumerate(results) if result.truncated]
            if not retry:
                return results
            again = []
            for i in retry:
                request = sized[i]
                if request.max_bytes >= self.max_buffer_size:
                    raise MessageSizeTooLarge(request.topic, request.partition, request.offset, self.max_buffer_size)
                sized[i] = request._replace(max_bytes=min(2 * request.max_bytes, self.max_buffer_size))
                again.append(sized[i])
            for i, result in zip(retry, self._fetch_once(again, 0, 0, level)):
                results[i] = result

    def _fetch_once(self, requests: list[FetchRequest], max_wait_ms: int, min_bytes: int,
                    isolation_level: int) -> list[MessageSet]:
        body = fetch_request_body(requests, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                  isolation_level=isolation_level)
        response = self._request(ApiKey.FETCH, body)
        parts = partitions_by_key(response)
        return [read_message_set(r.topic, r.partition, r.offset, parts.get((r.topic, r.partition)), isolation_level)
                for r in requests]

    def _request(self, api_key: int, body: dict) -> dict:
        try:
            return self._connection.request(api_key, body)
        except KafkaConnectionError:
            self._connection.close()
            return self._connection.request(api_key, body)

    def get_offsets_before(self, topic: str, partition: int, time: int, max_num_offsets: int = 1,
                           isolation_level: int | str | None = None) -> list[int]:
        """Offsets of ``topic``-``partition`` before ``time``, in descending order (the paper's getOffsetsBefore).

        ``time`` is -1 (latest: the log end offset first), -2 (earliest: the log start offset) or a
        timestamp in ms (the base offsets of the segments last written before it); at most
        ``max_num_offsets`` offsets. read_committed: latest is the last stable offset.
        """
        level = self.isolation_level if isolation_level is None else parse_isolation_level(isolation_level)
        try:
            return list_offsets(self._connection, topic, partition, time, max_num_offsets, level)
        except KafkaConnectionError:
            self._connection.close()
            return list_offsets(self._connection, topic, partition, time, max_num_offsets, level)

    def close(self) -> None:
        """Close the connection (a later call reconnects)."""
        self._connection.close()

    def __enter__(self) -> "SimpleConsumer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
