"""``python -m broker``: run one broker until SIGTERM or SIGINT, then shut it down cleanly (exit 0)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys

from broker.config import ConfigError, KafkaConfig, help_text, parse_overrides, read_properties_file
from broker.kafka_server import KafkaServer
from pipeline.service import write_owner_only


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m broker",
        description="Run a Kafka-protocol broker. Without zookeeper.connect it runs standalone: one node, "
                    "topic metadata kept in its log directory. With zookeeper.connect=host:port[,...]/chroot "
                    "it joins the cluster under that chroot: it registers as /brokers/ids/<broker.id>, one "
                    "broker is elected controller, and topics are created through it. Property names are "
                    "Kafka's (see --help-config).",
    )
    parser.add_argument("--config", metavar="FILE", help="a server.properties file")
    parser.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                        help="set a property, overriding the file (repeatable)")
    parser.add_argument("--log-dir", metavar="DIR", help="shorthand for --override log.dirs=DIR")
    parser.add_argument("--port", type=int, help="shorthand for --override port=PORT (0 picks a free port)")
    parser.add_argument("--host", help="shorthand for --override host.name=HOST (default 127.0.0.1)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    parser.add_argument("--help-config", action="store_true", help="list every property with its default and exit")
    return parser


def load_config(args: argparse.Namespace) -> KafkaConfig:
    values: dict[str, str] = {}
    if args.config:
        values.update(read_properties_file(args.config))
    for name, value in (("log.dirs", args.log_dir), ("port", args.port), ("host.name", args.host)):
        if value is not None:
            values[name] = str(value)
    values.update(parse_overrides(args.override))
    return KafkaConfig(values)


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (every log segment keeps its .log file open, and
    every connection a socket, as in Kafka); return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            logging.getLogger("broker").warning("cannot raise the open files limit from %d to %s: %s", soft, hard, exc)
    return soft


async def serve(config: KafkaConfig) -> None:
    try:
        server = KafkaServer(config)
    except ConfigError as exc:
        raise SystemExit(f"broker: {exc}") from None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await server.startup()
    except ConfigError as exc:
        raise SystemExit(f"broker: {exc}") from None
    await stop.wait()
    await server.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.help_config:
        print(help_text())
        return 0
    write_owner_only()
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args)
    except (ConfigError, OSError) as exc:
        print(f"broker: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("broker").info("open files limit: %s", raise_open_files_limit())
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(config))
    except OSError as exc:
        logging.getLogger("broker").error("cannot start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
