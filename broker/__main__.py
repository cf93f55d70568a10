"""``python -m broker [run]``: run one broker until SIGTERM or SIGINT, then shut it down cleanly (exit 0).

Exit codes: 0 stopped cleanly, 1 it could not start or failed (one line on stderr), 2 a wrong setting.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import sys
from typing import Any, Callable

from broker.config import PROPERTIES, KafkaConfig, parse_overrides, read_properties_file
from pipeline.config import Config
from pipeline.service import Service, add_settings_options, command_line, run_asyncio, runner

PROG = "python -m broker"


def add_run_parser(subparsers: Any) -> None:
    """``run``: serve until SIGTERM or SIGINT."""
    parser = subparsers.add_parser(
        "run", help="run the broker (the default command)",
        description="Run a Kafka-protocol broker. Without zookeeper.connect it runs standalone: one node, "
                    "topic metadata kept in its log directory. With zookeeper.connect=host:port[,...]/chroot "
                    "it joins the cluster under that chroot: it registers as /brokers/ids/<broker.id>, one "
                    "broker is elected controller, and topics are created through it. Property names are "
                    "Kafka's (see --help-config).")
    add_settings_options(parser, config_help="a server.properties file", aliases=("--override",),
                         set_help="set a property, overriding the file and the options below (repeatable; "
                                  "--override is Kafka's name for it)")
    parser.add_argument("--log-dir", metavar="DIR", help="shorthand for --set log.dirs=DIR")
    parser.add_argument("--port", type=int, help="shorthand for --set port=PORT (0 picks a free port)")
    parser.add_argument("--host", help="shorthand for --set host.name=HOST (default 127.0.0.1)")
    parser.add_argument("--log-level", help="shorthand for --set log.level=LEVEL: DEBUG, INFO, WARNING or ERROR "
                                            "(default INFO)")
    parser.set_defaults(command=run)


def load_config(args: argparse.Namespace) -> KafkaConfig:
    """The file, then the shorthand options, then --set/--override (Kafka's order: an override wins)."""
    values: dict[str, str] = {}
    if args.config:
        values.update(read_properties_file(args.config))
    for name, value in (("log.dirs", args.log_dir), ("port", args.port), ("host.name", args.host),
                        ("log.level", args.log_level)):
        if value is not None:
            values[name] = str(value)
    values.update(parse_overrides(args.set))
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


async def serve(config: Config, stop: asyncio.Event) -> None:
    """Start the broker, serve until ``stop``, shut it down."""
    from broker.kafka_server import KafkaServer

    server = KafkaServer(config)
    await server.startup()
    await stop.wait()
    await server.shutdown()


def _event_loop() -> Callable[[Any], Any]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def run(args: argparse.Namespace) -> int:
    return run_asyncio(Service(PROG, PROPERTIES, load_config), args, serve,
                       before=lambda _: logging.getLogger("broker").info("open files limit: %s",
                                                                          raise_open_files_limit()),
                       loop_runner=_event_loop())


def build_parser() -> argparse.ArgumentParser:
    return command_line(PROG, "Run a Kafka-protocol broker (`run`, the default).", (add_run_parser,))


def main(argv: list[str] | None = None) -> int:
    return runner.main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
