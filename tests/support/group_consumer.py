"""A consumer-group member in its own process, for tests that SIGKILL consumers.

    python -m tests.support.group_consumer --zookeeper H:P/chroot --group G --topic T --log FILE

It appends to FILE one line per event, each written straight to the file (os.write, so a SIGKILL loses
nothing written): ``READY <consumer id>`` once its streams exist, ``P <partition> <offset> <value>`` for
each message processed, and ``C <partition> <offset>`` for each offset it committed -- commits happen
every --commit-every messages, after the processed lines are written. SIGTERM shuts it down cleanly.
With --auto-commit-ms the connector also commits on its own at that interval. With --exit-hard-after N it
takes the N-th message, holds it for --hold-ms as if still processing it, and exits with os._exit(3)
(no shutdown, no commit: a crash).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time

from pipeline.client.consumer_connector import ConsumerConnector
from pipeline.client.consumer_stream import ConsumerTimeout

#: The exit status of a consumer that died on purpose in the middle of processing (--exit-hard-after).
CRASHED = 3


def parse_log(path: str | os.PathLike) -> tuple[list[tuple[int, int, str]], dict[int, int]]:
    """The (partition, offset, value) lines processed, in order, and the last offset committed per partition."""
    processed, committed = [], {}
    with open(path) as log:
        for line in log.read().splitlines():
            parts = line.split()
            if parts and parts[0] == "P" and len(parts) == 4:
                processed.append((int(parts[1]), int(parts[2]), parts[3]))
            elif parts and parts[0] == "C" and len(parts) == 3:
                committed[int(parts[1])] = int(parts[2])
    return processed, committed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zookeeper", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--commit-every", type=int, default=500)
    parser.add_argument("--rate", type=float, default=0.0, help="most messages per second (0: no limit)")
    parser.add_argument("--session-timeout-ms", type=int, default=4000)
    parser.add_argument("--auto-commit-ms", type=int, default=0, help="auto.commit.interval.ms (0: no auto-commit)")
    parser.add_argument("--exit-hard-after", type=int, default=0, help="crash while processing this message")
    parser.add_argument("--hold-ms", type=int, default=0, help="how long the crashing message is held first")
    args = parser.parse_args()

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    connector = ConsumerConnector({
        "zookeeper.connect": args.zookeeper, "group.id": args.group, "auto.offset.reset": "smallest",
        "auto.commit.enable": str(args.auto_commit_ms > 0).lower(),
        "auto.commit.interval.ms": max(args.auto_commit_ms, 1), "consumer.timeout.ms": 200,
        "rebalance.backoff.ms": 200, "zookeeper.session.timeout.ms": args.session_timeout_ms})
    stream = connector.create_message_streams({args.topic: 1})[args.topic][0]
    os.write(fd, f"READY {connector.consumer_id}\n".encode())
    started = time.monotonic()
    processed = 0
    try:
        while not stopping.is_set():
            try:
                record = next(stream)
            except ConsumerTimeout:
                continue
            except StopIteration:
                break
            os.write(fd, f"P {record.partition} {record.offset} {record.value.decode()}\n".encode())
            processed += 1
            if processed == args.exit_hard_after:
                time.sleep(args.hold_ms / 1000)  # still "processing" while auto-commits run
                os._exit(CRASHED)
            if processed % args.commit_every == 0:
                for (_, partition), offset in sorted(connector.commit_offsets().items()):
                    os.write(fd, f"C {partition} {offset}\n".encode())
            if args.rate > 0:
                ahead = processed / args.rate - (time.monotonic() - started)
                if ahead > 0:
                    stopping.wait(ahead)
    finally:
        connector.shutdown()
        os.close(fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
