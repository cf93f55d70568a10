"""``python -m infra.prometheus``: write a prometheus.yml for targets given by hand (the deployment writes its own).

    python -m infra.prometheus --out /tmp/p --target broker=127.0.0.1:9201,cluster=dc1 --target mirror=127.0.0.1:9311
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.prometheus.config import Job, Target, write


def parse_target(text: str) -> tuple[str, Target]:
    """``JOB=HOST:PORT[,LABEL=VALUE...]`` -> (job, target)."""
    head, *labels = text.split(",")
    job, separator, address = head.partition("=")
    pairs = [label.partition("=") for label in labels]
    if not job or not separator or any(not name or not sep for name, sep, _ in pairs):
        raise ValueError(f"{text!r} is not JOB=HOST:PORT[,LABEL=VALUE...]")
    return job, Target(address, {name: value for name, _, value in pairs})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.prometheus",
        description="Write OUT/prometheus.yml scraping the --target processes and loading the pipeline's recording "
                    "and alert rules (`make pipeline-up` writes var/prometheus/prometheus.yml for its own processes).")
    parser.add_argument("--out", type=Path, required=True, help="directory to write prometheus.yml into")
    parser.add_argument("--target", action="append", default=[], metavar="JOB=HOST:PORT[,LABEL=VALUE...]",
                        help="a process serving /metrics (repeat it)")
    parser.add_argument("--scrape-interval", default="15s", help="default 15s")
    parser.add_argument("--evaluation-interval", default="15s", help="default 15s")
    parser.add_argument("--hold", metavar="DURATION",
                        help="load copies of the rules in which every alert's `for:` is DURATION (e.g. 5s for a demo)")
    args = parser.parse_args(argv)
    try:
        given: dict[str, list[Target]] = {}
        for text in args.target:
            job, target = parse_target(text)
            given.setdefault(job, []).append(target)
        jobs = [Job(name, tuple(targets)) for name, targets in given.items()]
        if not jobs:
            parser.error("nothing to scrape: give --target")
        path = write(args.out, jobs, scrape_interval=args.scrape_interval,
                     evaluation_interval=args.evaluation_interval, hold=args.hold)
    except ValueError as error:
        parser.error(str(error))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
