"""One consume-transform-produce worker of the transactional Jepsen run, as a process the harness SIGKILLs.

``python -m tests.support.jepsen.txn_worker BOOTSTRAP INPUT OUTPUT GROUP PARTITION INCARNATION LOG`` reads input
partition PARTITION read_committed from the group's committed offset (OffsetFetch with RequireStable), and in
each transaction writes one output record per input record to the same partition of OUTPUT -- the value
``<partition>:<input offset>|<incarnation>-<transaction number>`` -- and commits the input offset with
send_offsets_to_transaction. Its transactional id is ``<GROUP>-<PARTITION>``, the same in every incarnation,
so a restarted worker fences its predecessor. Every ABORT_EVERY-th transaction is aborted on purpose. LOG gets one line per transaction outcome it learned
(``commit TAG`` / ``abort TAG``), written before the next transaction starts. An abortable error aborts and
goes back to the committed offset; a fatal one (fenced) or a timeout ends the process with exit code 3, and the
harness starts a new incarnation.
"""

from __future__ import annotations

import logging
import os
import sys

from pipeline.client.admin import AdminClient
from pipeline.client.consumer import Consumer
from pipeline.client.errors import TransactionAbortableError, TransactionFatalError
from pipeline.client.producer import ProduceError, Producer, ProducerData

BATCH = 20
TIMEOUT_S = 60.0
# Every this many transactions is aborted on purpose after its records were sent: aborted data in the logs
# that read_committed readers must skip, whatever the faults did.
ABORT_EVERY = 7
EXIT_FATAL = 3


def transactional_id(group: str, partition: int) -> str:
    return f"{group}-{partition}"


def output_value(partition: int, offset: int, tag: str) -> bytes:
    return f"{partition}:{offset}|{tag}".encode()


def main(argv: list[str]) -> int:
    bootstrap, input_topic, output_topic, group, partition_text, incarnation, log_path = argv
    partition = int(partition_text)
    logging.basicConfig(level=logging.WARNING, format=f"worker {partition}/{incarnation} %(levelname)s %(message)s")
    outcomes = open(log_path, "a", buffering=1)
    producer = Producer({"metadata.broker.list": bootstrap, "transactional.id": transactional_id(group, partition),
                         "transaction.timeout.ms": 20000, "request.timeout.ms": 5000,
                         "delivery.timeout.ms": 30000, "retry.backoff.ms": 50, "client.id": f"ctp-{partition}"})
    admin = AdminClient(bootstrap, timeout_s=TIMEOUT_S)
    try:
        producer.init_transactions(TIMEOUT_S)
        committed = admin.fetch_offsets(group, [(input_topic, partition)], require_stable=True)
        position = committed[(input_topic, partition)].offset if (input_topic, partition) in committed else 0
        consumer = Consumer({"metadata.broker.list": bootstrap, "isolation.level": "read_committed",
                             "consumer.timeout.ms": 300, "refresh.leader.backoff.ms": 50},
                            partitions={(input_topic, partition): position})
        number = 0
        while True:
            records = []
            for record in consumer:
                records.append(record)
                if len(records) >= BATCH:
                    break
            if not records:
                continue
            tag = f"{incarnation}-{number}"
            number += 1
            try:
                producer.begin_transaction()
                for record in records:
                    producer.send(ProducerData(output_topic, None, [output_value(partition, record.offset, tag)],
                                               partition=partition))
                end = records[-1].offset + 1
                producer.send_offsets_to_transaction({(input_topic, partition): end}, group, None, TIMEOUT_S)
                if number % ABORT_EVERY == 0:
                    producer.abort_transaction(TIMEOUT_S)
                    outcomes.write(f"abort {tag}\n")
                    consumer.seek(input_topic, partition, position)
                    continue
                producer.commit_transaction(TIMEOUT_S)
                outcomes.write(f"commit {tag}\n")
                position = end
            except (TransactionAbortableError, ProduceError) as exc:
                if isinstance(exc, ProduceError) and producer.transaction_state == "FATAL_ERROR":
                    raise
                logging.warning("aborting %s: %s", tag, exc)
                producer.abort_transaction(TIMEOUT_S)
                outcomes.write(f"abort {tag}\n")
                consumer.seek(input_topic, partition, position)
    except (TransactionFatalError, TimeoutError, ProduceError) as exc:
        logging.warning("ending: %r", exc)
        outcomes.close()
        os._exit(EXIT_FATAL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
