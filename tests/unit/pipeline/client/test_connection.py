"""BrokerConnection's ApiVersions fallback, against a canned peer that only speaks ApiVersions v0-2."""

from __future__ import annotations

import socket
import struct
import threading

from pipeline.client.connection import BrokerConnection
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import encode_response, read_request_header
from pipeline.protocol.errors import ErrorCode

OLD_BROKER_APIS = [
    {"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": 2},
    {"api_key": ApiKey.FETCH, "min_version": 0, "max_version": 6},
    {"api_key": ApiKey.PRODUCE, "min_version": 0, "max_version": 2},  # below our minimum of 3
]


def serve_old_broker(listener: socket.socket, seen_versions: list[int]) -> None:
    conn, _ = listener.accept()
    with conn:
        for _ in range(2):
            (length,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
            frame = conn.recv(length, socket.MSG_WAITALL)
            header = read_request_header(frame)
            seen_versions.append(header.api_version)
            if header.api_version > 2:
                body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": OLD_BROKER_APIS[:1]}
                version = 0
            else:
                body = {"error_code": ErrorCode.NONE, "api_keys": OLD_BROKER_APIS}
                version = header.api_version
            conn.sendall(b"".join(bytes(c) for c in encode_response(ApiKey.API_VERSIONS, version,
                                                                     header.correlation_id, body)))


def test_retries_at_the_brokers_version_and_keeps_only_common_apis():
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[int] = []
    thread = threading.Thread(target=serve_old_broker, args=(listener, seen))
    thread.start()
    try:
        connection = BrokerConnection("127.0.0.1", listener.getsockname()[1], timeout_s=10)
        connection.connect()
        connection.close()
    finally:
        thread.join(10)
        listener.close()
    assert seen == [3, 2]
    assert connection.versions[ApiKey.FETCH] == 6
    assert connection.versions[ApiKey.API_VERSIONS] == 2
    assert ApiKey.PRODUCE not in connection.versions
