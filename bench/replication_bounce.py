"""Leader bounces under acks=all load for as long as you like, Jepsen style, with the checker's totals.

Starts its own ZooKeeper and three brokers in a temporary directory, creates a topic (replication factor 3,
min.insync.replicas 2 unless told otherwise), and runs tests/support/jepsen's workload: an idempotent acks=all
writer sends numbered messages, a reader follows the leaders, and the leader of partition i % partitions is
bounced for i in range(bounces), hard (SIGKILL) for the --hard-ratio share, cleanly (SIGTERM) otherwise.
Then every partition is read from its start and checked. Prints one line per bounce, the totals (sent,
acknowledged, lost, duplicated, reordered, thin-air, phantom, wrong offset) and the failover times: from the
kill until a produce to the partition is acknowledged again. Exits 1 when the checker found an anomaly.

    python -m bench.replication_bounce --bounces 200 [--hard-ratio 0.5] [--partitions 3]
        [--replication-factor 3] [--min-insync-replicas 2] [--writer confluent|pipeline] [--rate 300]
        [--history history.json]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from tests.support.jepsen.clients import librdkafka_logger
from tests.support.jepsen.environment import create_topic, jepsen_cluster
from tests.support.jepsen.nemesis import Bounce
from tests.support.jepsen.workload import run

TOPIC = "bounce"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bounces", type=int, default=200)
    parser.add_argument("--hard-ratio", type=float, default=0.5, help="share of bounces that SIGKILL the leader")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--min-insync-replicas", type=int, default=2)
    parser.add_argument("--writer", choices=("confluent", "pipeline"), default="confluent",
                        help="confluent-kafka or the project's own producer (both idempotent, acks=all)")
    parser.add_argument("--rate", type=float, default=300.0, help="messages per second the writer sends")
    parser.add_argument("--history", type=Path, help="write the whole history here as JSON")
    args = parser.parse_args()
    if not 0.0 <= args.hard_ratio <= 1.0:
        parser.error("--hard-ratio must be between 0 and 1")
    # Refused connections to a killed broker are expected here.
    librdkafka_logger.setLevel(logging.CRITICAL)
    min_insync = min(args.min_insync_replicas, args.replication_factor)

    def report(number: int, bounce: Bounce) -> None:
        print(f"bounce {number + 1}/{args.bounces}: partition {bounce.partition} leader {bounce.broker} "
              f"{'SIGKILL' if bounce.hard else 'SIGTERM'}, serving again after {bounce.failover_s * 1000:.0f} ms "
              f"(leader {bounce.leader_after})", flush=True)

    with tempfile.TemporaryDirectory(prefix="replication-bounce-") as tmp:
        with jepsen_cluster(Path(tmp)) as cluster:
            create_topic(cluster, TOPIC, args.partitions, args.replication_factor, min_insync)
            outcome = run(cluster, TOPIC, args.partitions, args.bounces, hard_ratio=args.hard_ratio,
                          writer=args.writer, rate=args.rate, on_bounce=report)
    if args.history is not None:
        outcome.history.dump(args.history)
    result = outcome.result
    totals = result.totals()
    print(f"replication factor {args.replication_factor}, min.insync.replicas {min_insync}, "
          f"{args.partitions} partitions, {len(outcome.bounces)} bounces in {outcome.elapsed_s:.0f}s")
    print("acknowledged {acknowledged} (of {sent} sent), lost {lost}, duplicated {duplicated}, reordered {reordered}, "
          "thin-air {thin_air}, phantom {phantom}, wrong offset {wrong_offset}; read {reads} while running, "
          "final logs {final_length} messages".format(**totals))
    print(f"failover (kill to a produce acknowledged again): {outcome.failover_summary()}")
    if outcome.reader_errors:
        print(f"reader restarted {len(outcome.reader_errors)} times, first: {outcome.reader_errors[0]}")
    if not result.valid:
        print(result.summary())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
