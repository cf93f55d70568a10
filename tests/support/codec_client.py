"""A blocking Kafka connection speaking our own protocol codec, and the requests tests build with it.

For tests that talk to a real broker process at the protocol level, where stock clients would hide
what the broker answered (per-partition error codes, record_errors, connection closes).
"""

from __future__ import annotations

import socket
import struct

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import decode_response, encode_request


class Client:
    """A blocking Kafka connection speaking our codec, one request at a time or pipelined."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.correlation = 0

    def send(self, api_key: int, version: int, body: dict) -> int:
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "protocol-test", body))
        return self.correlation

    def send_raw_header(self, api_key: int, version: int, body: bytes = b"") -> int:
        """A request our codec would refuse to encode (a version nobody declares)."""
        self.correlation += 1
        client_id = b"protocol-test"
        payload = struct.pack(">hhih", api_key, version, self.correlation, len(client_id)) + client_id + body
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        return self.correlation

    def receive(self, api_key: int, version: int) -> tuple[int, dict]:
        (length,) = struct.unpack(">i", self._exact(4))
        return decode_response(api_key, version, self._exact(length))

    def call(self, api_key: int, version: int, body: dict) -> dict:
        sent = self.send(api_key, version, body)
        correlation, response = self.receive(api_key, version)
        assert correlation == sent
        return response

    def _exact(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(size)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def is_closed_by_peer(self, timeout: float = 10) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def create_topic(client: Client, name: str, partitions: int, configs: dict[str, str] | None = None) -> dict:
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": 5000}
    return client.call(ApiKey.CREATE_TOPICS, 4, body)["topics"][0]


def produce(client: Client, topic: str, partition: int, records: bytes, acks: int = 1, version: int = 8) -> dict:
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}
    if acks == 0:
        client.send(ApiKey.PRODUCE, version, body)
        return {}
    return client.call(ApiKey.PRODUCE, version, body)["responses"][0]["partition_responses"][0]


def fetch_body(parts: list[tuple[str, int, int, int]], max_wait_ms: int = 0, min_bytes: int = 1,
               max_bytes: int = 50 << 20) -> dict:
    topics: dict[str, list] = {}
    for topic, partition, offset, partition_max in parts:
        topics.setdefault(topic, []).append({"partition": partition, "current_leader_epoch": -1,
                                             "fetch_offset": offset, "log_start_offset": -1,
                                             "partition_max_bytes": partition_max})
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": p} for t, p in topics.items()], "forgotten_topics_data": [],
            "rack_id": ""}
