"""`python -m schemas.registry`: run the schema registry on ZooKeeper (shared) or a local directory.

    python -m schemas.registry --zookeeper localhost:2181/dc1 --port 8081
    python -m schemas.registry --data-dir var/schema-registry --port 8081

Errors are one line on stderr; SIGTERM or SIGINT stops it and it exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web

from pipeline.zk.client import ZooKeeperUnavailable, connect

from .backends import Backend, DirectoryBackend, ZooKeeperBackend
from .service import make_app
from .store import SchemaRegistryStore

DEFAULT_DATA_DIR = Path("var/schema-registry")
STORE_THREADS = 32


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m schemas.registry",
        description="A schema registry with the Confluent Schema Registry's REST API, for Avro schemas.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="keep the state in ZooKeeper, shared by every instance on the same chroot")
    where.add_argument("--data-dir", type=Path, metavar="DIR",
                       help=f"standalone: keep the state in a local directory (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=8081, help="port to listen on (default 8081)")
    parser.add_argument("--zookeeper-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="deadline of every ZooKeeper call (default 10)")
    return parser.parse_args(argv)


def open_backend(args: argparse.Namespace) -> Backend:
    if not args.zookeeper:
        return DirectoryBackend(args.data_dir or DEFAULT_DATA_DIR)
    # kazoo logs every failed connection attempt; a failure to start is reported once, by main.
    kazoo_log = logging.getLogger("kazoo")
    level = kazoo_log.level
    kazoo_log.setLevel(logging.CRITICAL + 1)
    try:
        client = connect(args.zookeeper, timeout_s=args.zookeeper_timeout)
    finally:
        kazoo_log.setLevel(level)
    return ZooKeeperBackend(client, args.zookeeper_timeout)


async def serve(store: SchemaRegistryStore, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Store calls wait on ZooKeeper round trips, not on the CPU: many may be in flight at once.
    loop.set_default_executor(ThreadPoolExecutor(max_workers=STORE_THREADS, thread_name_prefix="store"))
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runner = web.AppRunner(make_app(store), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        logging.getLogger("schemas.registry").info("schema registry listening on %s:%d", host, port)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        backend = open_backend(args)
    except (ZooKeeperUnavailable, ValueError, OSError) as error:
        print(f"schemas.registry: error: {error}", file=sys.stderr)
        return 1
    try:
        asyncio.run(serve(SchemaRegistryStore(backend), args.host, args.port))
    except OSError as error:
        print(f"schemas.registry: error: cannot listen on {args.host}:{args.port}: {error.strerror or error}",
              file=sys.stderr)
        return 1
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
