"""The high-level consumer delivers at least once: a record in processing when its consumer dies comes back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

from pipeline.client.consumer_stream import ConsumerTimeout, KafkaStream
from pipeline.client.consumer import ConsumerRecord
from pipeline.zk import layout
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.consumer_groups import BROKER_OVERRIDES, connector, create_topic, produce
from tests.support.group_consumer import CRASHED, parse_log
from tests.support.polling import wait_until


def next_record(stream: KafkaStream) -> ConsumerRecord | None:
    try:
        return next(stream)
    except ConsumerTimeout:
        return None


def test_a_record_held_past_the_auto_commit_interval_is_redelivered_after_a_crash(
        broker_cluster_factory: Callable[..., BrokerCluster], zk_connect: str, tmp_path: Path) -> None:
    brokers = broker_cluster_factory(zk_connect, size=1, overrides=BROKER_OVERRIDES)
    create_topic(brokers, "work", 1)
    produce(zk_connect, "work", ((None, f"w{i}".encode()) for i in range(10)))
    log = tmp_path / "victim.log"
    # Takes its third record, holds it through twenty auto-commit intervals, and dies without a word.
    victim = subprocess.Popen([sys.executable, "-m", "tests.support.group_consumer", "--zookeeper", zk_connect,
                               "--group", "crew", "--topic", "work", "--log", str(log), "--auto-commit-ms", "100",
                               "--exit-hard-after", "3", "--hold-ms", "2000"],
                              cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
                              stdin=subprocess.DEVNULL)
    try:
        assert victim.wait(60) == CRASHED
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    processed, _ = parse_log(log)
    assert processed == [(0, 0, "w0"), (0, 1, "w1"), (0, 2, "w2")]
    committed = int(brokers.zk.get(layout.offset_path("crew", "work", 0))[0])
    assert committed == 2, "the auto-commit covered the finished records, not the one in processing"
    survivor = connector(zk_connect, "crew")
    try:
        stream = survivor.create_message_streams({"work": 1})["work"][0]
        # The victim's ownership lasts until its session expires; then the survivor takes over.
        first = wait_until(lambda: next_record(stream), 30, message="the survivor's first record")
        assert (first.offset, first.value) == (2, b"w2"), "the record in processing is delivered again"
    finally:
        survivor.shutdown()
