"""`python -m schemas.registry [run]`: run the schema registry on ZooKeeper (shared) or a local directory.

    python -m schemas.registry --zookeeper localhost:2181/dc1 --port 8081
    python -m schemas.registry run --data-dir var/schema-registry --port 8081
    python -m schemas.registry --config config/schema-registry.properties --set zookeeper.timeout.s=5
    python -m schemas.registry --data-dir var/schema-registry --set listeners=https://0.0.0.0:8081 \
        --set ssl.keystore.location=registry-bundle.pem --set authentication.method=BASIC \
        --set authentication.users.file=registry-users.properties

With authentication.method=BASIC every request needs a user of the users file (``user: password[,role...]``;
``python -m pipeline.security.password_file`` hashes a password for it) whose roles allow it: any user reads,
``write`` registers, ``admin`` changes compatibility and mode and deletes (authorization.*.roles).

Errors are one line on stderr; SIGTERM or SIGINT stops it and it exits 0. Exit codes: 0 stopped cleanly, 1 it
could not start (ZooKeeper unreachable, the port taken), 2 a wrong setting.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web

from pipeline.service import Service, add_settings_options, command_line, run_asyncio, runner, settings_values
from pipeline.zk.client import connect

from .access import Access
from .backends import Backend, DirectoryBackend, ZooKeeperBackend
from .config import REGISTRY_PROPERTIES, RegistryConfig
from .service import make_app
from .store import SchemaRegistryStore

PROG = "python -m schemas.registry"
STORE_THREADS = 32


# Command-line options and the setting each one overrides.
_OPTIONS = {"zookeeper": "zookeeper.connect", "data_dir": "data.dir", "host": "host", "port": "port",
            "zookeeper_timeout": "zookeeper.timeout.s"}


def add_run_parser(subparsers: Any) -> None:
    """``run``: serve until SIGTERM or SIGINT."""
    parser = subparsers.add_parser(
        "run", help="run the schema registry (the default command)",
        description="A schema registry with the Confluent Schema Registry's REST API, for Avro schemas.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="keep the state in ZooKeeper, shared by every instance on the same chroot")
    where.add_argument("--data-dir", metavar="DIR",
                       help="standalone: keep the state in a local directory (default var/schema-registry)")
    parser.add_argument("--host", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8081)")
    parser.add_argument("--zookeeper-timeout", type=float, metavar="SECONDS",
                        help="deadline of every ZooKeeper call (default 10)")
    add_settings_options(parser, config_help="properties file (see --help-config); options override it")
    parser.set_defaults(command=run)


def load_config(args: argparse.Namespace) -> RegistryConfig:
    values = settings_values(args, _OPTIONS)
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
        client = connect(config["zookeeper.connect"], timeout_s=config["zookeeper.timeout.s"],
                         security=config.zookeeper_security)
    finally:
        kazoo_log.setLevel(level)
    return ZooKeeperBackend(client, config["zookeeper.timeout.s"])


async def serve(config: RegistryConfig, stop: asyncio.Event) -> None:
    """Serve until ``stop``."""
    backend = open_backend(config)
    try:
        # Store calls wait on ZooKeeper round trips, not on the CPU: many may be in flight at once.
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=STORE_THREADS, thread_name_prefix="store"))
        security = config.security
        app = make_app(SchemaRegistryStore(backend), security, Access(config))
        app_runner = web.AppRunner(app, access_log=None)
        await app_runner.setup()
        try:
            for listener in config.listeners:
                tls = security.ssl_context() if listener.scheme == "https" else None
                try:
                    await web.TCPSite(app_runner, listener.host, listener.port, ssl_context=tls).start()
                except OSError as error:
                    raise OSError(f"cannot listen on {listener}: {error.strerror or error}") from None
                logging.getLogger("schemas.registry").info("schema registry listening on %s (authentication %s)",
                                                           listener, security.method)
            await stop.wait()
        finally:
            await app_runner.cleanup()
    finally:
        backend.close()


def run(args: argparse.Namespace) -> int:
    return run_asyncio(Service(PROG, REGISTRY_PROPERTIES, load_config, (ValueError, OSError)), args, serve)


def build_parser() -> argparse.ArgumentParser:
    return command_line(PROG, "Run the schema registry (`run`, the default).", (add_run_parser,))


def main(argv: list[str] | None = None) -> int:
    return runner.main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
