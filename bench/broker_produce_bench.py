"""Broker-only produce throughput: pipelined Produce requests carrying pre-encoded batches.

Separates the broker's cost per request from any client's: each of CONNECTIONS connections sends the
same pre-built Produce request (one partition, BATCH records of SIZE bytes) over and over without
waiting, while a reader thread per connection counts the responses (acks=1) or, with acks=0, the log
end offset is polled until every record is stored. Prints requests/s and messages/s for each (batch,
acks) combination, with the broker process's CPU time (/proc) per record and per request -- the figure to
compare on a shared machine, where throughput depends on the neighbours. With --flush-interval-messages the broker fsyncs the log after that many messages
(log.flush.interval.messages); several connections then show whether concurrent appends share fsyncs.

With --security SSL the producing connections go to an SSL listener (certificates from a throwaway CA), so
the CPU figures include the broker's TLS reads; only acks=0 then (a TLS socket cannot be read by one thread
while another writes it).

    .venv/bin/python -m bench.broker_produce_bench [--messages 200000] [--size 200] [--batches 1,50] [--acks 0,1]
        [--connections 1] [--flush-interval-messages N] [--security PLAINTEXT|SSL]
"""

from __future__ import annotations

import argparse
import socket
import ssl
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import decode_response, encode_request
from pipeline.records import encode_batch
from tests.support import BrokerProcess
from tests.support.clients import create_topic
from tests.support.ports import free_port
from tests.support.tls import TestPki, ssl_listener_overrides

PRODUCE_VERSION = 7
PIPELINE_CHUNK = 100


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = sock.recv(size, socket.MSG_WAITALL)
    if len(data) != size:
        raise ConnectionError("broker closed the connection")
    return data


def log_end_offset(sock: socket.socket, topic: str) -> int:
    body = {"replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
    sock.sendall(encode_request(ApiKey.LIST_OFFSETS, 5, 1, "bench", body))
    (length,) = struct.unpack(">i", recv_exact(sock, 4))
    _, response = decode_response(ApiKey.LIST_OFFSETS, 5, recv_exact(sock, length))
    return response["topics"][0]["partitions"][0]["offset"]


def count_responses(sock: socket.socket, expected: int) -> None:
    pending = b""
    seen = 0
    while seen < expected:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        pending += chunk
        while len(pending) >= 4:
            (length,) = struct.unpack_from(">i", pending)
            if len(pending) < 4 + length:
                break
            pending = pending[4 + length :]
            seen += 1


def send_requests(sock: socket.socket, chunk: bytes, times: int) -> None:
    for _ in range(times):
        sock.sendall(chunk)


def measure(broker: BrokerProcess, topic: str, messages: int, size: int, batch: int, acks: int,
            connections: int, connect: Callable[[], socket.socket]) -> tuple[float, float, float]:
    """Requests/s, messages/s and the broker's CPU microseconds per record (from /proc) of one run."""
    create_topic(broker.bootstrap, topic, 1)
    records = encode_batch([b"v" * size] * batch)
    frame = encode_request(ApiKey.PRODUCE, PRODUCE_VERSION, 7, "bench", {
        "transactional_id": None, "acks": acks, "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    chunks_each = max(1, messages // batch // PIPELINE_CHUNK // connections)
    requests = chunks_each * PIPELINE_CHUNK * connections
    chunk = frame * PIPELINE_CHUNK
    socks = [connect() for _ in range(connections)]
    try:
        with socket.create_connection((broker.host, broker.port)) as control:
            started = time.perf_counter()
            cpu_before = broker.cpu_seconds()
            threads = [threading.Thread(target=send_requests, args=(sock, chunk, chunks_each)) for sock in socks]
            if acks:
                threads += [threading.Thread(target=count_responses, args=(sock, chunks_each * PIPELINE_CHUNK))
                            for sock in socks]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if not acks:
                while log_end_offset(control, topic) < requests * batch:
                    time.sleep(0.001)
            elapsed = time.perf_counter() - started
            cpu = broker.cpu_seconds() - cpu_before
    finally:
        for sock in socks:
            sock.close()
    return requests / elapsed, requests * batch / elapsed, cpu * 1e6 / (requests * batch)


def ssl_connector(directory: Path, port: int, overrides: dict[str, object]) -> Callable[[], socket.socket]:
    """Add an SSL listener (the tests' throwaway CA) to ``overrides``; return how to connect to it."""
    pki = TestPki.create(directory / "pki")
    ssl_port = free_port()
    overrides.update(ssl_listener_overrides(pki, port, ssl_port))
    context = ssl.create_default_context(cafile=pki.ca_file)
    return lambda: context.wrap_socket(socket.create_connection(("127.0.0.1", ssl_port)), server_hostname="127.0.0.1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batches", default="1,50", help="records per batch, comma-separated")
    parser.add_argument("--acks", default="0,1", help="acks values, comma-separated")
    parser.add_argument("--connections", type=int, default=1, help="concurrent pipelined producer connections")
    parser.add_argument("--flush-interval-messages", type=int, default=None,
                        help="the broker's log.flush.interval.messages (default: unset, the page cache decides)")
    parser.add_argument("--security", choices=("PLAINTEXT", "SSL"), default="PLAINTEXT",
                        help="the producing connections' listener (SSL: acks=0 only)")
    args = parser.parse_args()
    if args.security == "SSL" and args.acks != "0":
        parser.error("--security SSL measures acks=0 only: say --acks 0")
    flush = args.flush_interval_messages
    print(f"broker produce, pre-encoded batches of {args.size}-byte records, {args.connections} pipelined "
          f"connection(s), log.flush.interval.messages={flush if flush is not None else 'unset'}, {args.security}")
    overrides: dict[str, object] = {} if flush is None else {"log.flush.interval.messages": flush}
    with tempfile.TemporaryDirectory(prefix="produce-bench-") as tmp:
        port = free_port()
        connect = ssl_connector(Path(tmp), port, overrides) if args.security == "SSL" else None
        with BrokerProcess(Path(tmp) / "logs", log_path=Path(tmp) / "broker.log", overrides=overrides,
                           port=port) as broker:
            connect = connect or (lambda: socket.create_connection((broker.host, broker.port)))
            for batch in (int(b) for b in args.batches.split(",")):
                for acks in (int(a) for a in args.acks.split(",")):
                    messages = args.messages * (10 if batch >= 50 else 1)
                    rps, mps, cpu_us = measure(broker, f"b{batch}-a{acks}", messages, args.size, batch, acks,
                                               args.connections, connect)
                    print(f"  batch {batch:>4}  acks {acks:>2}: {rps:>10,.0f} requests/s {mps:>12,.0f} msg/s "
                          f"{cpu_us:>8.3f} broker CPU us/record {cpu_us * batch:>9.1f} us/request")


if __name__ == "__main__":
    main()
