"""The network layer alone on PLAINTEXT: pipelined small requests and 1 MiB file-region answers through SocketServer.

No Kafka protocol and no log: a handler answers each 10-byte frame with a 6-byte one, or a frame starting with
``f`` with a 1 MiB file region (sendfile). One client connection pipelines 200,000 small requests (1,000 per
write), then asks for 300 regions; prints requests/s and MB/s. ``--tree DIR`` imports the broker from another
checkout (e.g. ``git archive <commit> broker pipeline | tar -x -C DIR``) to compare two versions of the socket
server on the same machine; alternate the runs, the numbers move with the machine's load.

    .venv/bin/python -m bench.socket_server_bench [--tree DIR] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SMALL_REQUESTS = 200_000
PER_WRITE = 1000
REGIONS = 300
REGION_SIZE = 1 << 20
FRAME = struct.pack(">i", 10) + b"x" * 10
ANSWER = [struct.pack(">i", 6) + b"ok-ok!"]


class Region:
    """A file region as the storage layer hands it out (an fd of its own, closed after sending)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.position = 0
        self.size = REGION_SIZE

    def close(self) -> None:
        os.close(self.fd)


def client(port: int, payload: bytes, writes: int, expected_bytes: int) -> float:
    """Send ``payload`` ``writes`` times while a thread reads ``expected_bytes`` of answers; the seconds it took."""
    sock = socket.create_connection(("127.0.0.1", port))

    def read() -> None:
        got = 0
        while got < expected_bytes:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            got += len(chunk)
    reader = threading.Thread(target=read)
    reader.start()
    started = time.perf_counter()
    for _ in range(writes):
        sock.sendall(payload)
    reader.join()
    sock.close()
    return time.perf_counter() - started


async def run_once(socket_server: Any, region_file: str) -> tuple[float, float]:
    def handler(frame: memoryview, session: Any) -> list:
        return [struct.pack(">i", REGION_SIZE), Region(region_file)] if frame[0] == ord("f") else ANSWER

    server = socket_server.SocketServer("127.0.0.1", 0, handler, 1 << 20)
    await server.start()
    loop = asyncio.get_running_loop()
    try:
        small = await loop.run_in_executor(None, client, server.bound_port, FRAME * PER_WRITE,
                                           SMALL_REQUESTS // PER_WRITE, SMALL_REQUESTS * len(ANSWER[0]))
        regions = await loop.run_in_executor(None, client, server.bound_port, struct.pack(">i", 1) + b"f", REGIONS,
                                             REGIONS * (4 + REGION_SIZE))
    finally:
        await server.stop_accepting()
        await server.close_all()
    return SMALL_REQUESTS / small, REGIONS * REGION_SIZE / regions / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="import broker.server from this directory instead")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.tree is not None:
        sys.path.insert(0, str(args.tree.resolve()))
        for name in [m for m in sys.modules if m == "broker" or m.startswith(("broker.", "pipeline."))]:
            del sys.modules[name]
    socket_server = importlib.import_module("broker.server.socket_server")
    with tempfile.NamedTemporaryFile(prefix="socket-bench-") as region:
        region.write(os.urandom(REGION_SIZE))
        region.flush()
        for _ in range(args.runs):
            requests, megabytes = asyncio.run(run_once(socket_server, region.name))
            print(f"{Path(socket_server.__file__).parents[2]}: {requests:>10,.0f} small requests/s "
                  f"{megabytes:>8,.0f} MB/s of file regions")


if __name__ == "__main__":
    main()
