"""One runner for every ``python -m <service>``: its subcommands, settings, logging, signals and exit codes.

A service's ``__main__`` builds its parser with :func:`command_line` from its subcommands (pipeline/cli's style:
each ``add_parser(subparsers)`` sets ``command``, a function of the parsed arguments returning the exit code) and
hands it to :func:`main`; the long-running one is ``run``, also what a command line without a subcommand means. The ``run`` command hands a :class:`Service` and the function
that builds and runs the service to :func:`run_threaded` or :func:`run_asyncio`, which own the rest:
``--help-config``, the owner-only umask, the settings (``--config``, ``--set``, the options), logging at
``log.level``, SIGTERM and SIGINT as a clean stop, and the exit code -- 0 stopped cleanly, 1 a runtime failure, 2 a
bad setting or argument; a failure is one line on stderr: ``<prog>: error: <what>``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Sequence

from pipeline.config import Config, ConfigError, Property
from pipeline.service.process import log_to_stderr, write_owner_only
from pipeline.service.settings import print_settings_table
from pipeline.service.signals import stop_on_signals, stop_on_signals_async

__all__ = ["BAD_SETTINGS", "EXIT_BAD_SETTINGS", "EXIT_FAILED", "EXIT_OK", "RUN", "Service", "command_line", "fail",
           "main", "parse", "run_asyncio", "run_threaded"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_SETTINGS = 2
RUN = "run"
# What reading the settings may raise: a wrong setting (ConfigError is a ValueError), an unreadable --config.
BAD_SETTINGS: tuple[type[BaseException], ...] = (ValueError, OSError)


def fail(prog: str, error: BaseException | str, code: int) -> int:
    """Report ``error`` as one line on stderr; ``code``."""
    text = error if isinstance(error, str) else str(error) or type(error).__name__
    print(f"{prog}: error: {text}", file=sys.stderr)
    return code


def command_line(prog: str, description: str, commands: Iterable[Callable[[Any], Any]], *,
                 default: str | None = RUN) -> argparse.ArgumentParser:
    """A service's parser with ``commands`` registered (each an ``add_parser(subparsers)``); its --help shows the
    ``default`` command's options too, since a command line naming no command means that one."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    for add_parser in commands:
        add_parser(subparsers)
    if default is not None:
        parser.epilog = f"`{prog}` without a COMMAND means `{prog} {default}`:\n\n" + \
            subparsers.choices[default].format_help()
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, *,
          default: str | None = RUN) -> argparse.Namespace:
    """Parse ``argv`` (None: the process's); ``default`` is the subcommand of a command line that names none."""
    given = list(sys.argv[1:] if argv is None else argv)
    choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    if default is not None and (not given or given[0] not in choices and given[0] not in ("-h", "--help")):
        given.insert(0, default)
    return parser.parse_args(given)


def main(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, *, default: str | None = RUN) -> int:
    """Run the subcommand ``argv`` names (see :func:`parse`), logging to stderr; its exit code."""
    args = parse(parser, argv, default=default)
    log_to_stderr()
    return args.command(args)


@dataclass(frozen=True)
class Service:
    """One long-running service: its name on stderr, its settings table (``--help-config``), how a parsed command
    line becomes its settings (raising ConfigError, ValueError or OSError for a bad one), and the errors that are
    runtime failures (exit 1) rather than bugs."""

    prog: str
    table: Sequence[Property]
    load: Callable[[argparse.Namespace], Config]
    failures: tuple[type[BaseException], ...] = (OSError,)


def _prepare(service: Service, args: argparse.Namespace) -> Config | int:
    """The settings of ``args`` with the process set up for them, or the exit code when there is nothing to run."""
    if args.help_config:
        print_settings_table(service.table)
        return EXIT_OK
    try:
        config = service.load(args)
    except BAD_SETTINGS as error:
        return fail(service.prog, error, EXIT_BAD_SETTINGS)
    write_owner_only()
    log_to_stderr(config.get("log.level") or "info")
    return config


def run_threaded(service: Service, args: argparse.Namespace,
                 body: Callable[[Config, threading.Event], int | None]) -> int:
    """Run ``body(config, stop)`` in this thread, ``stop`` set by SIGTERM or SIGINT; its result (None: 0) is the
    exit code."""
    config = _prepare(service, args)
    if isinstance(config, int):
        return config
    try:
        return body(config, stop_on_signals()) or EXIT_OK
    except ConfigError as error:
        return fail(service.prog, error, EXIT_BAD_SETTINGS)
    except service.failures as error:
        return fail(service.prog, error, EXIT_FAILED)


def run_asyncio(service: Service, args: argparse.Namespace,
                body: Callable[[Config, asyncio.Event], Awaitable[int | None]],
                *, before: Callable[[Config], None] | None = None,
                loop_runner: Callable[[Awaitable[Any]], Any] = asyncio.run) -> int:
    """Run ``await body(config, stop)`` on an event loop (``loop_runner``, e.g. uvloop.run), ``stop`` set by
    SIGTERM or SIGINT; ``before(config)`` runs first, outside the loop. Its result (None: 0) is the exit code."""
    config = _prepare(service, args)
    if isinstance(config, int):
        return config

    async def serve() -> int | None:
        return await body(config, stop_on_signals_async())

    try:
        if before is not None:
            before(config)
        return loop_runner(serve()) or EXIT_OK
    except ConfigError as error:
        return fail(service.prog, error, EXIT_BAD_SETTINGS)
    except service.failures as error:
        return fail(service.prog, error, EXIT_FAILED)
