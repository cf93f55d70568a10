"""Throughput of the protocol codec on the broker's hot path.

Measures requests per second for: decoding a Produce v8 request with 10 partitions (header +
body), encoding a Fetch v11 response with 10 partitions (in-memory records, and file regions as
the broker sends them), and decoding that Fetch response as a client does. When kafka-python is installed, its codec is
measured on the same two hot-path messages as a reference (its Fetch encode includes building its
message objects, as ours includes reading our dicts).

    python -m bench.protocol_bench [--seconds 2]
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    read_request_header,
)

PARTITIONS = 10
RECORDS = b"\x00" * 1024


class FileRegion:
    """What the broker hands the codec for sendfile: only ``size`` is read."""

    def __init__(self, size: int) -> None:
        self.size = size


def produce_frame() -> bytes:
    """A Produce v8 request frame (without the length prefix), 10 partitions of 1 KiB."""
    body = {
        "transactional_id": None, "acks": -1, "timeout_ms": 30000,
        "topic_data": [{"name": "events", "partition_data": [
            {"index": p, "records": RECORDS} for p in range(PARTITIONS)]}],
    }
    return encode_request(ApiKey.PRODUCE, 8, 1, "bench-producer", body)[4:]


def fetch_body(records: object) -> dict:
    """A Fetch v11 response body, 10 partitions."""
    return {
        "throttle_time_ms": 0, "error_code": 0, "session_id": 0,
        "responses": [{"topic": "events", "partitions": [
            {"partition_index": p, "error_code": 0, "high_watermark": 1000 + p,
             "last_stable_offset": 1000 + p, "log_start_offset": 0, "aborted_transactions": None,
             "preferred_read_replica": -1, "records": records}
            for p in range(PARTITIONS)]}],
    }


def kafka_python_cases(frame: bytes) -> list[tuple[str, Callable[[], object]]]:
    """The same Produce decode and Fetch encode done by kafka-python, if it is installed."""
    try:
        from kafka.protocol.consumer import FetchResponse
        from kafka.protocol.producer import ProduceRequest
    except ImportError:
        return []
    topic_cls = FetchResponse.FetchableTopicResponse
    partition_cls = topic_cls.PartitionData

    def encode_fetch() -> object:
        partitions = [partition_cls(partition_index=p, error_code=0, high_watermark=1000 + p,
                                    last_stable_offset=1000 + p, log_start_offset=0,
                                    aborted_transactions=None, preferred_read_replica=-1, records=RECORDS)
                      for p in range(PARTITIONS)]
        response = FetchResponse(version=11, throttle_time_ms=0, error_code=0, session_id=0,
                                 responses=[topic_cls(topic="events", partitions=partitions)])
        return response.encode()

    return [
        ("kafka-python: decode the same Produce request", lambda: ProduceRequest.decode(frame, version=8, header=True)),
        ("kafka-python: encode the same Fetch response (1 KiB bytes)", encode_fetch),
    ]


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``fn``, measured for about ``seconds``."""
    calls = 0
    batch = 200
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(batch):
            fn()
        calls += batch
        now = time.perf_counter()
        if now >= deadline:
            return calls / (now - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    args = parser.parse_args()

    frame = produce_frame()

    def decode_produce() -> object:
        header = read_request_header(frame)
        return decode_request(header, frame, header.size)

    inline = fetch_body(RECORDS)
    regions = fetch_body(FileRegion(1024))
    fetch_frame = b"".join(encode_response(ApiKey.FETCH, 11, 1, inline))[4:]

    cases = [
        ("decode Produce v8 request, 10 partitions", decode_produce),
        ("encode Fetch v11 response, 10 partitions, file regions", lambda: encode_response(ApiKey.FETCH, 11, 1, regions)),
        ("encode Fetch v11 response, 10 partitions, 1 KiB bytes each", lambda: encode_response(ApiKey.FETCH, 11, 1, inline)),
        ("decode Fetch v11 response, 10 partitions", lambda: decode_response(ApiKey.FETCH, 11, fetch_frame)),
    ]
    cases += kafka_python_cases(frame)
    for name, fn in cases:
        per_second = rate(fn, args.seconds)
        print(f"{name:62s} {per_second:>10,.0f} /s  {1e6 / per_second:7.1f} us")


if __name__ == "__main__":
    main()
