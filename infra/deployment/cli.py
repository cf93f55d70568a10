"""The deployment's subcommands: up, down, clean, status and chaos, on a topology file."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from infra.deployment.topology import DEFAULT_TOPOLOGY, TopologyError, load

__all__ = ["add_deployment_parsers", "main"]

PROG = "python -m infra.deployment"
TOPOLOGY_ENV = "PIPELINE_TOPOLOGY"


def add_topology_option(parser: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    """``--topology FILE``; ``inherited``: on a subcommand whose parent has it too, so that the option may come
    before or after the subcommand's name (the subcommand's default then leaves the parent's value alone)."""
    default = argparse.SUPPRESS if inherited else os.environ.get(TOPOLOGY_ENV) or str(DEFAULT_TOPOLOGY)
    parser.add_argument("--topology", metavar="FILE", default=default,
                        help=f"the deployment's topology file (default ${TOPOLOGY_ENV} or infra/topology.yml)")


def run_up(args: argparse.Namespace) -> int:
    from infra.deployment.lifecycle import up

    up(load(args.topology), sys.stdout, wait_for_events=not args.no_wait)
    return 0


def run_down(args: argparse.Namespace) -> int:
    from infra.deployment.lifecycle import down

    down(load(args.topology), sys.stdout)
    return 0


def run_clean(args: argparse.Namespace) -> int:
    from infra.deployment.lifecycle import clean

    clean(load(args.topology), sys.stdout)
    return 0


def add_deployment_parsers(subparsers: argparse._SubParsersAction, *, lifecycle: bool) -> None:
    """Register status and chaos (and, with ``lifecycle``, up, down and clean) on ``subparsers``."""
    if lifecycle:
        for name, handler, text in (
                ("up", run_up, "start the whole pipeline under supervisord, stage by stage, and print where to look"),
                ("down", run_down, "stop every process (reverse order) and supervisord; the data stays"),
                ("clean", run_clean, "down, then remove the var directory")):
            parser = subparsers.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
            add_topology_option(parser)
            if name == "up":
                parser.add_argument("--no-wait", action="store_true",
                                    help="return once every process is healthy, without waiting for the first "
                                         "events to reach the offline cluster")
            parser.set_defaults(handler=handler)
    from infra.deployment import chaos, status

    status.add_parser(subparsers, add_topology_option)
    chaos.add_parser(subparsers, add_topology_option)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser = argparse.ArgumentParser(prog=prog, description="The whole pipeline on one machine, under supervisord.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_deployment_parsers(subparsers, lifecycle=True)
    args = parser.parse_args(argv)
    return run(args, parser.prog)


def run(args: argparse.Namespace, prog: str) -> int:
    """Run the parsed subcommand; errors in one line (a DeploymentError's log tail after it), exit 1."""
    from infra.deployment.lifecycle import DeploymentError
    from infra.deployment.supervisor import SupervisorError

    try:
        return args.handler(args)
    except (TopologyError, SupervisorError) as exc:
        print(f"{prog} {args.command}: {exc}", file=sys.stderr)
        return 1
    except DeploymentError as exc:
        print(f"{prog} {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
