"""A broker process under clients that leave their connections behind (issue 26): 1,000 JoinGroups sent and
reset at once, and 1,000 sockets that sent a 4-byte length and nothing else, all from one address, locked every
new client out for up to the rebalance timeout or connections.max.idle.ms. Now another client is served within
a second, the abandoned JoinGroups' connections are given back at once and the half-sent frames' after
socket.request.read.timeout.ms; at a max.connections that the crowd fills, a client from another address still
gets in."""

from __future__ import annotations

import socket
import struct
import time

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import encode_request
from tests.support import wire
from tests.support.broker_metrics import scrape, value
from tests.support.polling import wait_until

ABANDONED = 1000


def join_group_v0(correlation_id: int) -> bytes:
    return encode_request(ApiKey.JOIN_GROUP, 0, correlation_id, "abandoner", {
        "group_id": "abandoned", "session_timeout_ms": 30000, "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]})


def reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def served_within(host: str, port: int, source: str, seconds: float) -> float:
    """Connect from ``source``, send ApiVersions and return how long the answer took (fails past ``seconds``)."""
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=seconds, source_address=(source, 0)) as sock:
        sock.sendall(wire.encode_request(wire.API_VERSIONS, 0, 1, b""))
        wire.read_frame(sock)
    return time.monotonic() - started


def test_abandoned_join_groups_and_half_sent_frames_lock_no_one_out(broker_factory):
    broker = broker_factory(overrides={
        "host.name": "0.0.0.0", "max.connections": 1500, "socket.request.read.timeout.ms": 2000,
        "group.initial.rebalance.delay.ms": 600000, "metrics.port": 0})
    silent: list[socket.socket] = []
    try:
        for index in range(ABANDONED):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            sock.sendall(join_group_v0(index))
            reset(sock)
        for _ in range(ABANDONED):
            try:
                sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
                sock.sendall(struct.pack(">i", 64))
            except OSError:
                break  # refused at max.connections: the crowd holds all it can
            silent.append(sock)
        # The abandoned JoinGroups are noticed while they wait for a rebalance ten minutes away.
        wait_until(lambda: value(scrape(broker), "kafka_server_socket_server_metrics_connection_count") <= len(silent),
                   timeout=10, message="the abandoned JoinGroups' connections given back")
        assert served_within("127.0.0.1", broker.port, "127.0.0.2", 1.0) < 1.0
        assert served_within("127.0.0.1", broker.port, "127.0.0.1", 1.0) < 1.0
        # The half-sent frames hold their connections only socket.request.read.timeout.ms.
        wait_until(lambda: value(scrape(broker), "kafka_server_socket_server_metrics_connection_count") == 0,
                   timeout=10, message="the half-sent frames' connections closed")
        timed_out = value(scrape(broker), "kafka_server_socket_server_metrics_client_errors_total",
                          kind="request_read_timeout")
        assert timed_out is not None and timed_out >= 400
        # One line per kind and address, not one per connection.
        assert broker.log_text().count("bytes of a request and nothing more") == 1
    finally:
        for sock in silent:
            sock.close()
