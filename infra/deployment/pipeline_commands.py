"""`status` and `chaos`: the deployment of `make pipeline-up`, seen and shaken from the pipeline's command line.

infra registers this module in the entry-point group ``kafka_pipeline.commands`` (pyproject.toml), which
`python -m pipeline` reads, so that pipeline, below infra, never imports it. Both subcommands hand their arguments
to `python -m infra.deployment`'s parser, imported only when one of them runs, so that the other subcommands start
as fast as before.
"""

from __future__ import annotations

import argparse


COMMANDS = {
    "status": "every process of the deployment and its key figures (`python -m pipeline status --help`)",
    "chaos": "fault drills against the running deployment: kill-broker DC, kill-mirror, kill-etl, pause-zookeeper, "
             "kill-registry, kill-audit, poison-record DC TOPIC, fill-disk DC (`python -m pipeline chaos --help`)",
}


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """List `status` and `chaos` in the help (``run`` parses them: their options are the deployment's)."""
    for name, text in COMMANDS.items():
        subparsers.add_parser(name, help=text, description=text, add_help=False)


def run(argv: list[str]) -> int:
    """Run ``status`` or ``chaos`` with the deployment's own parser (``argv`` starts with the subcommand)."""
    from infra.deployment.cli import main

    return main(argv, prog="python -m pipeline")
