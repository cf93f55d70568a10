"""`python -m schemas.registry`: run the schema registry on ZooKeeper (shared) or a local directory.

    python -m schemas.registry --zookeeper localhost:2181/dc1 --port 8081
    python -m schemas.registry --data-dir var/schema-registry --port 8081
    python -m schemas.registry --config config/schema-registry.properties

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

from pipeline.config import ConfigError, command_line_values, help_table
from pipeline.service import log_to_stderr, write_owner_only
from pipeline.zk.client import ZooKeeperUnavailable, connect

from .backends import Backend, DirectoryBackend, ZooKeeperBackend
from .config import REGISTRY_PROPERTIES, RegistryConfig
from .service import make_app
from .store import SchemaRegistryStore

STORE_THREADS = 32


# Command-line options and the setting each one overrides.
_OPTIONS = {"zookeeper": "zookeeper.connect", "data_dir": "data.dir", "host": "host", "port": "port",
            "zookeeper_timeout": "zookeeper.timeout.s"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m schemas.registry",
        description="A schema registry with the Confluent Schema Registry's REST API, for Avro schemas.")
    parser.add_argument("--config", metavar="FILE", help="properties file (see --help-config); options override it")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="keep the state in ZooKeeper, shared by every instance on the same chroot")
    where.add_argument("--data-dir", metavar="DIR",
                       help="standalone: keep the state in a local directory (default var/schema-registry)")
    parser.add_argument("--host", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8081)")
    parser.add_argument("--zookeeper-timeout", type=float, metavar="SECONDS",
                        help="deadline of every ZooKeeper call (default 10)")
    parser.add_argument("--help-config", action="store_true", help="list every setting and exit")
    return parser.parse_args(argv)


def load_config(args: argparse.Namespace) -> RegistryConfig:
    values = command_line_values(args.config, (), {name: getattr(args, option) for option, name in _OPTIONS.items()})
    # --data-dir on the command line means standalone, whatever the file says.
    if args.data_dir is not None:
        values.pop("zookeeper.connect", None)
    return RegistryConfig(values)


def open_backend(config: RegistryConfig) -> Backend:
    if not config["zookeeper.connect"]:
        return DirectoryBackend(Path(config["data.dir"]))
    # kazoo logs every failed connection attempt; a failure to start is reported once, by main.
    kazoo_log = logging.getLogger("kazoo")
    level = kazoo_log.level
    kazoo_log.setLevel(logging.CRITICAL + 1)
    try:
        client = connect(config["zookeeper.connect"], timeout_s=config["zookeeper.timeout.s"])
    finally:
        kazoo_log.setLevel(level)
    return ZooKeeperBackend(client, config["zookeeper.timeout.s"])


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
    if args.help_config:
        print(help_table(REGISTRY_PROPERTIES))
        return 0
    write_owner_only()
    log_to_stderr()
    try:
        config = load_config(args)
        backend = open_backend(config)
    except (ConfigError, ZooKeeperUnavailable, ValueError, OSError) as error:
        print(f"schemas.registry: error: {error}", file=sys.stderr)
        return 1
    host, port = config["host"], config["port"]
    try:
        asyncio.run(serve(SchemaRegistryStore(backend), host, port))
    except OSError as error:
        print(f"schemas.registry: error: cannot listen on {host}:{port}: {error.strerror or error}", file=sys.stderr)
        return 1
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
