"""Entry point of `make bench`: our broker beside RabbitMQ, ActiveMQ and NATS JetStream, in one run.

Writes bench/results/<date>/report.md, results.json and PNG plots (or into --out).

    .venv/bin/python -m bench.run                 # 1,000,000 messages per test
    .venv/bin/python -m bench.run --ten-million   # the paper's 10,000,000
    .venv/bin/python -m bench.run --smoke --out /tmp/b   # tiny counts, every system and test (make test)
    .venv/bin/python -m bench.run --rerender bench/results/<date>   # report.md + plots from results.json
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from bench.harness import report
from bench.harness.runner import SYSTEMS, Settings, run

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per produce/consume test")
    parser.add_argument("--ten-million", action="store_true", help="10,000,000 messages per test, as in the paper")
    parser.add_argument("--smoke", action="store_true", help="tiny counts (2,000 messages) to check the harness")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ", ".join(SYSTEMS))
    parser.add_argument("--latency-rate", type=int, default=5000, help="messages/s of the latency test")
    parser.add_argument("--out", type=Path, help="output directory (default bench/results/<date>)")
    parser.add_argument("--rerender", type=Path, metavar="DIR",
                        help="only write report.md and the plots again from DIR/results.json")
    args = parser.parse_args(argv)
    if args.rerender:
        report.rerender(args.rerender)
        print(f"report: {args.rerender / 'report.md'}")
        return 0
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {list(SYSTEMS)}")
    settings = Settings(systems=systems, latency_rate=args.latency_rate, log=lambda line: print(line, flush=True))
    if args.smoke:
        settings.messages, settings.latency_messages, settings.fetch_rounds = 2000, 500, 1
    elif args.ten_million:
        settings.messages = 10_000_000
    else:
        settings.messages = args.messages
    date = datetime.date.today().isoformat()
    out = args.out or RESULTS / date
    document = run(settings, date)
    report.write(document, out)
    print(f"report: {out / 'report.md'}")
    return 1 if document["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
