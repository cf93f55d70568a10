"""Transactions' cost: transactional produce against idempotent produce, and read_committed against
read_uncommitted fetch, with our clients on one standalone broker.

Produce: MESSAGES records of SIZE bytes to a fresh one-partition topic with the async Producer (batch.size 200,
queue.time 5 ms, one send() per record), the clock stopped when the last record is acknowledged:

* idempotent: enable.idempotence=true, one flush() at the end;
* transactional, N per transaction: transactional.id set; begin_transaction(), N sends, commit_transaction()
  (which flushes and then ends the transaction with EndTxn), for each N of --transaction-sizes.

Fetch: the Consumer reads a topic from offset 0 to its end, decoding every record, in both isolation levels:

* plain: the same records written without transactions (read_committed must cost nothing more there);
* transactional: written in transactions of --fetch-transaction-size records, every tenth one aborted, so that
  read_committed filters aborted batches and skips the markers.

Each fetch case runs --rounds times, the two levels alternating; the best time counts.

    .venv/bin/python -m bench.transaction_bench [--messages 100000] [--size 200]
                                                [--transaction-sizes 10,100,1000,10000] [--fetch-messages 500000]
                                                [--smoke]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from pipeline.client.consumer import Consumer
from pipeline.client.producer import Producer, ProducerData
from pipeline.client.simple_consumer import SimpleConsumer
from tests.support import BrokerProcess
from tests.support.clients import create_topic
from tests.support.polling import wait_until

MiB = 1024 * 1024
ABORT_EVERY = 10


def _producer(bootstrap: str, **extra: object) -> Producer:
    return Producer({"metadata.broker.list": bootstrap, "producer.type": "async", "batch.size": 200,
                     "queue.time": 5, "queue.buffering.max.messages": 50000, **extra})


def produce_idempotent(bootstrap: str, topic: str, messages: int, size: int) -> float:
    payload = b"m" * size
    started = time.perf_counter()
    with _producer(bootstrap, **{"enable.idempotence": True}) as producer:
        send = producer.send
        for _ in range(messages):
            send(ProducerData(topic, None, [payload], partition=0))
        producer.flush()
        elapsed = time.perf_counter() - started
        assert producer.failed_messages == 0
    return elapsed


def produce_transactional(bootstrap: str, topic: str, messages: int, size: int, per_transaction: int,
                          abort_every: int = 0) -> float:
    """Seconds to write ``messages`` records in transactions of ``per_transaction``; with ``abort_every``, every
    abort_every-th transaction is aborted after its records were flushed (so they are in the log)."""
    payload = b"m" * size
    started = time.perf_counter()
    with _producer(bootstrap, **{"transactional.id": f"bench-{topic}"}) as producer:
        producer.init_transactions()
        send = producer.send
        for number, start in enumerate(range(0, messages, per_transaction)):
            producer.begin_transaction()
            for _ in range(min(per_transaction, messages - start)):
                send(ProducerData(topic, None, [payload], partition=0))
            if abort_every and number % abort_every == abort_every - 1:
                producer.flush()
                producer.abort_transaction()
            else:
                producer.commit_transaction()
        elapsed = time.perf_counter() - started
    return elapsed


def consume(bootstrap: str, topic: str, isolation_level: str, expected: int) -> tuple[float, int]:
    """(seconds, records) for one Consumer reading ``topic``-0 from 0 until ``expected`` records arrived (or
    nothing more came for two seconds), each record decoded."""
    count = 0
    started = time.perf_counter()
    with Consumer({"metadata.broker.list": bootstrap, "isolation.level": isolation_level,
                   "fetch.message.max.bytes": MiB, "consumer.timeout.ms": 2000},
                  partitions={(topic, 0): 0}) as consumer:
        for record in consumer:
            count += 1
            if count >= expected:
                break
    return time.perf_counter() - started, count


def _settle(broker: BrokerProcess, topic: str) -> None:
    with SimpleConsumer(broker.host, broker.port) as consumer:
        wait_until(lambda: consumer.get_offsets_before(topic, 0, -1, 1, isolation_level=1)
                   == consumer.get_offsets_before(topic, 0, -1, 1), timeout=60, message=f"{topic} settled")


def _aborted_records(messages: int, per_transaction: int) -> int:
    return sum(min(per_transaction, messages - start) for number, start in enumerate(range(0, messages, per_transaction))
               if number % ABORT_EVERY == ABORT_EVERY - 1)


def run(messages: int, size: int, transaction_sizes: list[int], fetch_messages: int, fetch_per_transaction: int,
        rounds: int = 3) -> list[tuple[str, float, int]]:
    rows: list[tuple[str, float, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "logs")
        broker.start()
        try:
            create_topic(broker.bootstrap, "idem", 1)
            rows.append(("produce idempotent", produce_idempotent(broker.bootstrap, "idem", messages, size), messages))
            for per in transaction_sizes:
                topic = f"tx-{per}"
                create_topic(broker.bootstrap, topic, 1)
                rows.append((f"produce transactional, {per}/transaction",
                             produce_transactional(broker.bootstrap, topic, messages, size, per), messages))
            create_topic(broker.bootstrap, "plain", 1)
            payload = os.urandom(size)
            with Producer({"metadata.broker.list": broker.bootstrap, "request.required.acks": 1}) as producer:
                for _ in range(fetch_messages // 100):
                    producer.send(ProducerData("plain", None, [payload] * 100, partition=0))
            create_topic(broker.bootstrap, "mixed", 1)
            produce_transactional(broker.bootstrap, "mixed", fetch_messages, size, fetch_per_transaction,
                                  abort_every=ABORT_EVERY)
            _settle(broker, "mixed")
            committed = fetch_messages - _aborted_records(fetch_messages, fetch_per_transaction)
            # Records each reader gets: every one read_uncommitted; read_committed, the committed ones.
            for topic, committed_records in (("plain", fetch_messages), ("mixed", committed)):
                best: dict[str, float] = {}
                for _ in range(rounds):  # alternating, best of each, so that neither level gets a colder cache
                    for level, wanted in (("read_uncommitted", fetch_messages), ("read_committed", committed_records)):
                        seconds, count = consume(broker.bootstrap, topic, level, wanted)
                        assert count == wanted, f"{topic} {level}: read {count} of {wanted} records"
                        best[level] = min(best.get(level, seconds), seconds)
                rows += [(f"fetch {topic}, {level}", seconds, fetch_messages if level == "read_uncommitted"
                          else committed_records) for level, seconds in best.items()]
        finally:
            broker.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--transaction-sizes", default="10,100,1000,10000")
    parser.add_argument("--fetch-messages", type=int, default=500_000)
    parser.add_argument("--fetch-transaction-size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="fetch rounds per case (the best counts)")
    parser.add_argument("--smoke", action="store_true", help="tiny counts: check that every case runs")
    args = parser.parse_args()
    sizes = [int(s) for s in args.transaction_sizes.split(",")]
    if args.smoke:
        args.messages, args.fetch_messages, args.fetch_transaction_size = 2000, 5000, 100
        sizes = [10, 1000]
    rows = run(args.messages, args.size, sizes, args.fetch_messages, args.fetch_transaction_size,
               1 if args.smoke else args.rounds)
    width = max(len(name) for name, _, _ in rows)
    print(f"{'case':<{width}}  {'records':>9}  {'msg/s':>10}  {'MB/s':>7}")
    for name, seconds, count in rows:
        print(f"{name:<{width}}  {count:>9}  {count / seconds:>10,.0f}  {count * args.size / seconds / MiB:>7.1f}")


if __name__ == "__main__":
    main()
