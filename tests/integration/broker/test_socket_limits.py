"""A broker process under hostile or heavy connection load: clients announcing huge requests cost only the
bytes they send, and running out of file descriptors neither spins the accept loop nor stops service."""

from __future__ import annotations

import os
import resource
import select
import socket
import struct
import time
from pathlib import Path

from tests.support import wire
from tests.support.clients import create_topic
from tests.support.load import build_batch
from tests.support.polling import wait_until

MiB = 1024 * 1024


def produce_and_fetch(broker, topic: str) -> None:
    batch = build_batch(4096)
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        result = wire.produce(conn, topic, 0, batch)
        assert result.error_code == 0
        fetched = wire.fetch(conn, topic, 0, result.base_offset, max_wait_ms=0)
        assert fetched.error_code == 0 and fetched.records[16 : len(batch)] == batch[16:]  # past offset, length, leader epoch


def test_connections_announcing_huge_requests_cost_only_what_they_send(broker_factory):
    broker = broker_factory()
    create_topic(broker.bootstrap, "served", 1)
    produce_and_fetch(broker, "served")
    rss_before = broker.rss_bytes()
    hostile = []
    try:
        for _ in range(30):
            sock = socket.create_connection((broker.host, broker.port), timeout=10)
            hostile.append(sock)
            # A 100 MiB request (the largest socket.request.max.bytes allows) of which 64 KiB ever arrive.
            sock.sendall(struct.pack(">i", 100 * MiB) + os.urandom(64 * 1024))
        produce_and_fetch(broker, "served")
        growth = broker.rss_bytes() - rss_before
        assert growth < 30 * MiB, f"broker RSS grew {growth / MiB:.0f} MiB for 30 connections that sent 64 KiB each"
        produce_and_fetch(broker, "served")
    finally:
        for sock in hostile:
            sock.close()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def answers_api_versions(sock: socket.socket, timeout: float) -> bool:
    """Send ApiVersions v0 on ``sock`` and whether its answer arrives within ``timeout`` seconds."""
    sock.sendall(wire.encode_request(wire.API_VERSIONS, 0, 1, b""))
    sock.settimeout(timeout)
    try:
        wire.read_frame(sock)
    except socket.timeout:
        return False
    return True


def served_or_stuck(broker, sock: socket.socket) -> str:
    """Send ApiVersions v0 on a new connection and wait until it is answered ("served") or the broker logs
    that accept failed while it waits in the backlog ("stuck")."""
    sock.sendall(wire.encode_request(wire.API_VERSIONS, 0, 1, b""))

    def outcome() -> str | None:
        if select.select([sock], [], [], 0.05)[0]:
            wire.read_frame(sock)
            return "served"
        return "stuck" if "accept failed" in broker.log_text() else None
    return wait_until(outcome, message="an answer or an accept failure")


def test_accept_backs_off_while_descriptors_run_out_and_resumes(broker_factory):
    broker = broker_factory()
    pid = broker.pid
    highest_fd = max(int(name) for name in os.listdir(f"/proc/{pid}/fd"))
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (highest_fd + 4, hard))
    served: list[socket.socket] = []
    stuck = None
    try:
        while stuck is None and len(served) < 50:
            sock = socket.create_connection((broker.host, broker.port), timeout=10)
            if served_or_stuck(broker, sock) == "served":
                served.append(sock)
            else:
                stuck = sock  # completed the handshake but waits in the backlog: accept fails with EMFILE
        assert stuck is not None, "the broker accepted 50 connections under a limit of a few descriptors"
        assert served, "no connection was served before the limit"
        failures_before = broker.log_text().count("accept failed")
        cpu_before = cpu_seconds(pid)
        time.sleep(3.0)  # a measurement window while accept keeps failing, not a wait for a condition
        cpu_used = cpu_seconds(pid) - cpu_before
        failures_logged = broker.log_text().count("accept failed") - failures_before
        assert cpu_used < 0.3, f"the broker used {cpu_used:.2f}s of CPU in 3s while accept failed"
        assert failures_logged <= 1, f"{failures_logged} accept failures logged in 3s"
        # Existing connections are still served.
        assert answers_api_versions(served[0], timeout=5.0)
        for sock in served[-2:]:
            sock.close()
        del served[-2:]
        # The waiting connection is accepted once descriptors are free, and its request answered.
        stuck.settimeout(10)
        wire.read_frame(stuck)
        wait_until(lambda: "accepting connections again" in broker.log_text(), message="the recovery logged")
        with wire.KafkaConnection(broker.host, broker.port) as conn:
            wire.api_versions(conn)
    finally:
        for sock in served:
            sock.close()
        if stuck is not None:
            stuck.close()


def test_broker_properties_limit_connections_and_close_idle_ones(broker_factory):
    broker = broker_factory(overrides={"max.connections": 2, "connections.max.idle.ms": 1000})
    clients = [socket.create_connection((broker.host, broker.port), timeout=10) for _ in range(2)]
    try:
        assert all(answers_api_versions(sock, timeout=10) for sock in clients)
        refused = socket.create_connection((broker.host, broker.port), timeout=10)
        clients.append(refused)
        assert refused.recv(1) == b""
        assert "already has the configured maximum of 2 connections" in broker.log_text()
        # Both accepted connections go silent and are closed after connections.max.idle.ms.
        for sock in clients[:2]:
            assert sock.recv(1) == b""
        with wire.KafkaConnection(broker.host, broker.port) as conn:
            wire.api_versions(conn)
    finally:
        for sock in clients:
            sock.close()
