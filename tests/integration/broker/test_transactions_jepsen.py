"""Exactly-once consume-transform-produce under faults, Jepsen style: one worker process per input partition reads
read_committed, writes one output record per input record and commits its input offset in the same transaction
(send_offsets_to_transaction), while a feeder writes the input and a read_committed reader follows the output.
Faults in turn: an output partition's leader bounced (SIGKILL / SIGTERM), the broker coordinating a worker's
transactional id SIGKILLed (coordinator failover), a worker SIGKILLed and restarted with the same transactional id,
and a worker paused while a new incarnation takes over, then let go on: a zombie that must be fenced.

read_committed readers must see every input record exactly once (none lost, none twice, in input order, in the
input's partition), no record of an aborted transaction -- neither in the final log nor while the run goes on --
and the group's committed offsets must end exactly where the outputs end.
"""

from __future__ import annotations

import pytest

from tests.support.jepsen.environment import create_topic, jepsen_cluster
from tests.support.jepsen.txn_worker import EXIT_FATAL
from tests.support.jepsen.txn_workload import FAULTS, run_transactional

PARTITIONS = 2
ROUNDS = 3


@pytest.mark.slow
def test_consume_transform_produce_is_exactly_once_under_faults(tmp_path):
    faults = [fault for _ in range(ROUNDS) for fault in FAULTS]
    with jepsen_cluster(tmp_path) as cluster:
        for topic in ("txn-in", "txn-out"):
            create_topic(cluster, topic, PARTITIONS, replication_factor=3, min_insync_replicas=2)
        outcome = run_transactional(cluster, tmp_path / "workers", input_topic="txn-in", output_topic="txn-out",
                                    group="ctp", partitions=PARTITIONS, faults=faults, rate=150)
    result = outcome.result
    print(f"{result.summary()}\nfaults: {outcome.faults}\nworker starts {outcome.worker_starts}, "
          f"transactions committed {outcome.committed_transactions}, aborted {outcome.aborted} "
          f"({outcome.uncommitted_outputs - result.outputs} aborted output records in the log); "
          f"{outcome.elapsed_s:.0f}s")
    assert result.valid, result.summary()
    assert len(outcome.faults) == len(faults)
    # A worker was SIGKILLed and one replaced once per round; the run moved enough data to mean something.
    assert outcome.worker_starts >= PARTITIONS + 2 * ROUNDS
    assert outcome.zombie_exits == [EXIT_FATAL] * ROUNDS, outcome.faults
    assert result.inputs >= 100 * len(faults) and result.live_reads > 0, result.summary()
    # Aborted transactions' records are in the logs (the workers abort some on purpose), hidden from the readers.
    assert outcome.aborted > 0 and outcome.uncommitted_outputs > result.outputs
