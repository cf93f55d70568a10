"""The exactly-once mirror (real ZooKeeper, brokers and schema registry): SIGKILLed 20 times at random moments while
producers write to both sources, it leaves every source record in the target exactly once as read_committed readers
see it (by lineage), and its audit tier, committed in the same transactions, counts each record once."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

from mirror.quarantine import read_quarantine
from pipeline.client.admin import AdminClient
from schemas.events import AUDIT_TOPIC
from tests.support.cluster import BrokerCluster
from tests.support.mirror import (
    MirrorProcess,
    audit_tier_counts,
    committed,
    create_topic,
    end_offsets,
    lineages,
    mirror_args,
    mirror_error,
    mirror_until_committed,
    produce,
    read_all,
    read_committed,
    target_count,
)
from tests.support.polling import wait_until
from tests.support.registry import RegistryProcess

PARTITIONS = 3
KILLS = 20
WINDOW_MS = 60_000
BASE_MS = 1_700_000_040_000 - 1_700_000_040_000 % WINDOW_MS


class SourceWriter:
    """Writes batches of records to one source until stopped, like an emulator."""

    def __init__(self, name: str, cluster: BrokerCluster) -> None:
        self.name = name
        self.cluster = cluster
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"writer-{name}", daemon=True)

    def _run(self) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                batch = [(b"k%d" % (n % 101), b"%s-%d" % (self.name.encode(), n), BASE_MS + (n % 5) * WINDOW_MS + n, [])
                         for n in range(i, i + 200)]
                produce(self.cluster, "events", batch)
                i += len(batch)
                self.stop.wait(0.1)
        except BaseException as exc:  # reported by the test
            self.error = exc


def target_offsets(target: BrokerCluster, group: str) -> dict[tuple[str, int], int]:
    with AdminClient(target.bootstrap) as admin:
        return {tp: o.offset for tp, o in admin.fetch_offsets(group).items()}


def test_sigkill_20_times_while_the_sources_are_written_leaves_every_record_once(
        clusters: dict[str, BrokerCluster], registry: RegistryProcess, tmp_path: Path) -> None:
    dc1, dc2, offline = clusters["dc1"], clusters["dc2"], clusters["offline"]
    sources = {"dc1": dc1, "dc2": dc2}
    for dc in sources.values():
        create_topic(dc, "events", PARTITIONS)
    args = [a for a in mirror_args(sources, offline, "events", "--set", "producer.batch.size=50",
                                   "--set", "exactly.once=true", "--set", "process.id=test",
                                   "--set", f"audit.window.ms={WINDOW_MS}", "--registry", registry.url)
            if a != "--no-audit"]
    writers = [SourceWriter(name, cluster) for name, cluster in sources.items()]
    for writer in writers:
        writer.thread.start()
    rng = random.Random(29)
    try:
        for attempt in range(KILLS):
            mirror = MirrorProcess(tmp_path / f"mirror{attempt}.log", args).start()
            try:
                # Killed anywhere: while starting, fencing, copying or committing.
                deadline = time.monotonic() + rng.uniform(0.5, 4.0)
                while time.monotonic() < deadline:
                    mirror.alive()
                    time.sleep(0.05)
            finally:
                mirror.kill()
        assert target_count(offline, "events", PARTITIONS) > 0, "nothing was mirrored between the kills"
    finally:
        for writer in writers:
            writer.stop.set()
            writer.thread.join(60)
    assert all(w.error is None for w in writers), [w.error for w in writers]
    last = MirrorProcess(tmp_path / "mirror-last.log", args).start()
    try:
        for name, cluster in sources.items():
            ends = end_offsets(cluster, "events", PARTITIONS)
            wait_until(lambda: last.alive() and all(target_offsets(offline, f"mirror.{name}").get(("events", p)) == e
                                                    for p, e in ends.items()),
                       120, interval=0.5, message=lambda: f"{name} committed in the target: {last.log_tail(5)}")
        assert last.stop() == 0, last.log_tail()
    finally:
        last.kill()
    # Every source record once, as read_committed readers see the target.
    found = Counter((lineage.cluster, lineage.partition, lineage.offset)
                    for _, _, lineage in lineages(read_committed(offline, "events", PARTITIONS)))
    for name, cluster in sources.items():
        for partition, end in end_offsets(cluster, "events", PARTITIONS).items():
            missing = [o for o in range(end) if (name, partition, o) not in found]
            assert not missing, f"{name} events-{partition}: {len(missing)} records lost, first {missing[:5]}"
    twice = [key for key, n in found.items() if n > 1]
    assert not twice, f"{len(twice)} records mirrored twice, first {twice[:5]}"
    # The kills did interrupt transactions: a read_uncommitted reader sees their aborted records (copied again).
    uncommitted = sum(len(rs) for rs in read_all(offline, "events", PARTITIONS).values())
    assert uncommitted > sum(found.values())
    # The audit's mirror tier, committed with the records: each window counts what the producers wrote, once.
    audit = [r for rs in read_committed(offline, AUDIT_TOPIC, 1).values() for r in rs]
    counts = audit_tier_counts(audit, registry.url, "mirror")
    expected = Counter((name, "events", r.timestamp - r.timestamp % WINDOW_MS) for name, cluster in sources.items()
                       for rs in read_all(cluster, "events", PARTITIONS).values() for r in rs)
    assert counts == expected
    # The source offsets were copied to the sources too (for a switch back to at least once).
    assert all(committed(dc1, "mirror", "events", p) is not None for p in range(PARTITIONS))


def test_switching_from_at_least_once_starts_at_the_source_offsets_then_the_target_s_and_a_killed_writer_is_fenced(
        clusters: dict[str, BrokerCluster], tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    create_topic(dc1, "events", PARTITIONS)

    def more(tag: bytes) -> dict[int, int]:
        produce(dc1, "events", [(b"k%d" % i, tag + b"-%d" % i, BASE_MS + i, []) for i in range(2000)])
        return end_offsets(dc1, "events", PARTITIONS)

    at_least_once = mirror_args({"dc1": dc1}, offline, "events")
    mirror_until_committed(tmp_path / "alo.log", at_least_once, dc1, "events", more(b"a"))
    for process, tag in (("one", b"b"), ("two", b"c"), ("three", b"d")):
        ends = more(tag)
        mirror = MirrorProcess(tmp_path / f"eos-{process}.log", [
            *at_least_once, "--set", "exactly.once=true", "--set", f"process.id={process}"]).start()
        try:
            wait_until(lambda: mirror.alive() and " owns " in mirror.log_text()
                       and all(target_offsets(offline, "mirror.dc1").get(("events", p)) == e for p, e in ends.items()),
                       90, interval=0.2, message=lambda: f"committed in the target: {mirror.log_tail(5)}")
            if process == "two":
                mirror.kill()  # its offsets stay unreleased: whoever takes them next fences it first
            else:
                assert mirror.stop() == 0, mirror.log_tail()
        finally:
            mirror.kill()
        # "one" starts from the source's offsets, "two" from those "one" released (no fencing), "three" fences "two".
        fenced = "fencing transactional id mirror.dc1.two" in mirror.log_text()
        assert fenced == (process == "three"), mirror.log_tail()
    found = Counter((lineage.cluster, lineage.partition, lineage.offset)
                    for _, _, lineage in lineages(read_committed(offline, "events", PARTITIONS)))
    assert sorted(found) == sorted(("dc1", p, o) for p, e in ends.items() for o in range(e))
    assert set(found.values()) == {1}
    with AdminClient(offline.bootstrap) as admin:
        metadata = {o.metadata for o in admin.fetch_offsets("mirror.dc1").values()}
    assert metadata == {"released:mirror.dc1.three"}


def test_a_record_the_target_refuses_for_good_is_quarantined_its_transaction_aborted_and_skipped_after_the_restart(
        clusters: dict[str, BrokerCluster], tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    create_topic(dc1, "Strict", 1)
    # The target keeps Strict compacted: a record without a key is invalid there (INVALID_RECORD), for good.
    create_topic(offline, "Strict", 1, {"cleanup.policy": "compact"})
    produce(dc1, "Strict", [(b"k1", b"one", BASE_MS, []), (None, b"no key", BASE_MS, []), (b"k2", b"two", BASE_MS, []),
                            (b"k3", b"three", BASE_MS, [])])
    state = tmp_path / "state"
    args = mirror_args({"dc1": dc1}, offline, "Strict", "--state-dir", str(state), "--set", "exactly.once=true",
                       "--set", "process.id=q")
    _, error = mirror_error(tmp_path / "first.log", args)
    assert "for good (quarantined)" in error and "restarts from the offsets committed in the target" in error
    mirror = MirrorProcess(tmp_path / "second.log", args).start()
    try:
        wait_until(lambda: mirror.alive() and target_offsets(offline, "mirror.dc1").get(("Strict", 0)) == 4, 60,
                   interval=0.2, message=lambda: f"Strict committed in the target: {mirror.log_tail(5)}")
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        mirror.kill()
    strict = read_committed(offline, "Strict", 1)[0]
    assert [(r.key, r.value) for r in strict] == [(b"k1", b"one"), (b"k2", b"two"), (b"k3", b"three")]
    [entry] = list(read_quarantine(state / "mirror" / "quarantine" / "dc1.jsonl"))
    assert (entry["topic"], entry["offset"], entry["reason"]) == ("Strict", 1, "invalid for the target")


def test_a_second_process_under_the_same_transactional_ids_fences_the_first_which_stops_with_one_error_line(
        clusters: dict[str, BrokerCluster], tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    create_topic(dc1, "events", PARTITIONS)
    produce(dc1, "events", [(b"k%d" % i, b"v-%d" % i, BASE_MS + i, []) for i in range(3000)])
    args = mirror_args({"dc1": dc1}, offline, "events", "--set", "exactly.once=true", "--set", "process.id=same")
    first = MirrorProcess(tmp_path / "first.log", args).start()
    second = None
    try:
        wait_until(lambda: first.alive() and target_offsets(offline, "mirror.dc1"), 60, interval=0.2,
                   message=lambda: f"a first commit: {first.log_tail(5)}")
        # A restarted process whose predecessor is still running (a zombie): its init_transactions fences it.
        second = MirrorProcess(tmp_path / "second.log", args).start()
        assert first.wait(60) == 1, first.log_tail()
        errors = [line for line in first.log_text().splitlines() if line.startswith("python -m mirror: error:")]
        assert len(errors) == 1 and "mirror.dc1.same was fenced" in errors[0], first.log_tail()
        produce(dc1, "events", [(b"k%d" % i, b"w-%d" % i, BASE_MS + i, []) for i in range(1000)])
        ends = end_offsets(dc1, "events", PARTITIONS)
        wait_until(lambda: second.alive() and all(target_offsets(offline, "mirror.dc1").get(("events", p)) == e
                                                  for p, e in ends.items()),
                   90, interval=0.2, message=lambda: f"the second committed everything: {second.log_tail(5)}")
        assert second.stop() == 0, second.log_tail()
    finally:
        first.kill()
        if second is not None:
            second.kill()
    found = Counter((lineage.cluster, lineage.partition, lineage.offset)
                    for _, _, lineage in lineages(read_committed(offline, "events", PARTITIONS)))
    assert sorted(found) == sorted(("dc1", p, o) for p, e in ends.items() for o in range(e))
    assert set(found.values()) == {1}
