"""The log cleaner's passes over a compacted Log: what is kept, where, and what is left alone."""

from __future__ import annotations

import logging
import os
import threading

import pytest
from tests.support.cleaner import (
    clean_until_done,
    cleaner_for,
    compacted,
    compact_config,
    keyed_batch,
    read_batches_of,
    read_records,
    ready_to_clean,
    updates,
    write_updates,
)

from broker.log import Log
from broker.log.errors import OutOfOrderSequenceError
from broker.log.log import now_ms
from broker.log.cleaner import CleanerConfig, Throttler
from pipeline.testing_faults import Faults
from broker.log.log_cleaner_manager import CLEANER_OFFSET_CHECKPOINT_FILE
from broker.log.log_segment import LogSegment
from pipeline.records.batch import COMPRESSION_MASK, iter_batches
from pipeline.protocol.compression import GZIP, LZ4, SNAPPY, ZSTD
from pipeline.records import decode_batch, encode_batch


@pytest.fixture
def log(tmp_path):
    log = Log(tmp_path / "compacted-0", compact_config())
    yield log
    log.close()


def test_many_updates_to_few_keys_leave_the_latest_value_of_each(log):
    written = write_updates(log, updates(keys=5, rounds=100))
    ready_to_clean(log)
    size_before = log.size_in_bytes()
    batch_size = len(keyed_batch([(b"key-00", b"value-000000")]))
    assert cleaner_for(log).clean_once()
    records = read_records(log)
    assert records == compacted(written)
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(offsets) and offsets[0] == 495  # the gap 0..494 is what compaction removed
    assert log.log_start_offset == 0 and log.log_end_offset == 500
    # Every kept batch is a whole original one: the log shrinks to exactly five of them.
    assert log.size_in_bytes() == 5 * batch_size < size_before


def test_a_second_pass_finds_nothing_to_do_and_a_new_cleaner_reads_the_checkpoint(log, tmp_path):
    write_updates(log, updates(keys=3, rounds=20))
    ready_to_clean(log)
    assert cleaner_for(log).clean_once()
    checkpoint = (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).read_text().split("\n")
    assert checkpoint[:3] == ["0", "1", "compacted 0 60"]
    assert not cleaner_for(log).clean_once()
    write_updates(log, updates(keys=3, rounds=2))
    ready_to_clean(log)
    cleaner = cleaner_for(log)
    assert cleaner.clean_once()
    assert cleaner.last_stats.map_messages_read == 6


def test_a_tiny_offset_map_cleans_in_several_passes(log):
    written = write_updates(log, updates(keys=40, rounds=3))
    ready_to_clean(log)
    assert clean_until_done(cleaner_for(log, dedupe_buffer_size=24 * 20)) >= 6
    assert read_records(log) == compacted(written)


def test_a_pass_stopping_inside_a_segment_leaves_the_rest_of_it_for_the_next(tmp_path):
    log = Log(tmp_path / "big-0", compact_config(segment_bytes=1 << 20))
    written = write_updates(log, updates(keys=60, rounds=2))
    ready_to_clean(log)
    assert log.segment_count == 2  # one inactive segment holds everything
    assert clean_until_done(cleaner_for(log, dedupe_buffer_size=24 * 50)) >= 3
    assert read_records(log) == compacted(written)
    log.close()


def test_the_active_segment_is_never_cleaned(log):
    write_updates(log, updates(keys=2, rounds=30))
    log.roll()
    active = write_updates(log, updates(keys=2, rounds=5, start=60))
    log.update_high_watermark(log.log_end_offset)
    active_base = log.segment_base_offsets()[-1]
    assert cleaner_for(log).clean_once()
    records = read_records(log)
    assert [r for r in records if r[0] >= active_base] == active
    assert [r[0] for r in records if r[0] < active_base] == [58, 59]


def test_records_above_the_high_watermark_are_not_cleaned(log):
    written = write_updates(log, updates(keys=2, rounds=30))
    log.roll()
    log.update_high_watermark(0)
    assert not cleaner_for(log).clean_once()
    assert read_records(log) == written


def test_records_newer_than_min_compaction_lag_stay(tmp_path):
    log = Log(tmp_path / "lagging-0", compact_config(min_compaction_lag_ms=60_000))
    now = 10_000_000
    old = write_updates(log, updates(keys=2, rounds=20), timestamp=now - 120_000)
    log.roll()
    recent = write_updates(log, updates(keys=2, rounds=20, start=40), timestamp=now - 1_000)
    ready_to_clean(log)
    assert cleaner_for(log, time_ms=lambda: now).clean_once()
    assert read_records(log) == old[-2:] + recent
    log.close()


def test_min_compaction_lag_holds_back_the_rest_of_a_segment_a_pass_stopped_inside(tmp_path):
    now = 10_000_000
    log = Log(tmp_path / "lagging-0", compact_config(segment_bytes=1 << 20))
    write_updates(log, updates(keys=60, rounds=2), timestamp=now - 1_000)
    ready_to_clean(log)
    cleaner = cleaner_for(log, time_ms=lambda: now, dedupe_buffer_size=24 * 50)
    assert cleaner.clean_once()  # stops inside the one inactive segment: its offset map is full
    after_first_pass = read_records(log)
    log.config.min_compaction_lag_ms = 60_000
    assert not cleaner.clean_once()
    assert read_records(log) == after_first_pass
    log.close()


def test_max_compaction_lag_forces_a_pass_below_the_dirty_ratio(tmp_path):
    now = 10_000_000
    config = compact_config(min_cleanable_dirty_ratio=0.99)
    log = Log(tmp_path / "waiting-0", config)
    write_updates(log, updates(keys=2, rounds=20), timestamp=now - 120_000)
    ready_to_clean(log)
    assert cleaner_for(log, time_ms=lambda: now).clean_once()  # the first pass: everything is dirty
    write_updates(log, updates(keys=2, rounds=1, start=40), timestamp=now - 120_000)
    ready_to_clean(log)
    assert not cleaner_for(log, time_ms=lambda: now).clean_once()
    config.max_compaction_lag_ms = 60_000  # read at each pass: topic configs change at run time
    assert cleaner_for(log, time_ms=lambda: now).clean_once()
    assert [key for _, key, _ in read_records(log)] == [b"key-00", b"key-01"]
    log.close()


def test_tombstones_stay_until_delete_retention_ms_after_their_segment_was_cleaned(tmp_path):
    log = Log(tmp_path / "tombstones-0", compact_config(delete_retention_ms=60_000))
    write_updates(log, updates(keys=3, rounds=10))
    write_updates(log, [(b"key-01", None)])
    ready_to_clean(log)
    start = now_ms()
    now = [start]
    for name in os.listdir(log.dir):  # written long ago: only the cleaning starts the tombstone's clock
        os.utime(log.dir / name, ns=((now[0] - 3_600_000) * 1_000_000,) * 2)
    cleaner = cleaner_for(log, time_ms=lambda: now[0])
    assert cleaner.clean_once()
    live = [(b"key-00", b"value-000027"), (b"key-02", b"value-000029")]
    assert [(key, value) for _, key, value in read_records(log)] == live + [(b"key-01", None)]
    for later, tombstone in ((59_000, [(b"key-01", None)]), (61_000, [])):
        write_updates(log, [(b"key-03", b"new-%d" % later)])
        ready_to_clean(log)
        now[0] = start + later
        assert cleaner.clean_once()
        assert [(key, value) for _, key, value in read_records(log)] == live + tombstone + [(b"key-03", b"new-%d" % later)]
    log.close()


def test_small_segments_are_merged(log):
    write_updates(log, updates(keys=4, rounds=50))
    ready_to_clean(log)
    cleaner = cleaner_for(log)
    assert cleaner.clean_once()
    segments_after_first = log.segment_count
    write_updates(log, updates(keys=4, rounds=1, start=200))
    ready_to_clean(log)
    assert cleaner.clean_once()
    assert log.segment_count < segments_after_first
    assert len(read_records(log)) == 4


def test_reads_and_timestamp_lookups_cross_the_gaps(log):
    written = write_updates(log, updates(keys=3, rounds=30))
    ready_to_clean(log)
    cleaner_for(log).clean_once()
    first_kept = min(offset for offset, _, _ in read_records(log))
    with log.read(5, 1 << 20) as fetched:
        data = fetched.read_bytes()
    assert int.from_bytes(data[:8], "big") == first_kept
    assert log.offset_for_timestamp(0)[0] == first_kept
    assert read_records(log)[-1] == written[-1]


def test_producer_state_and_leader_epochs_survive_cleaning(tmp_path):
    log = Log(tmp_path / "idempotent-0", compact_config())
    for seq in range(10):
        log.append_as_leader(keyed_batch([(b"shared", b"from-7-%d" % seq)], producer_id=7, producer_epoch=0,
                                         base_sequence=seq), leader_epoch=1)
    for seq in range(10):
        log.append_as_leader(keyed_batch([(b"shared", b"from-8-%d" % seq)], producer_id=8, producer_epoch=0,
                                         base_sequence=seq), leader_epoch=2)
    ready_to_clean(log)
    epochs_before = (log.end_offset_for_epoch(1), log.end_offset_for_epoch(2))
    assert cleaner_for(log).clean_once()
    batches = read_batches_of(log)
    # Producer 7's records are all superseded, but its last batch stays (empty) for its sequence state.
    assert [(h.producer_id, h.base_sequence, h.record_count, h.base_offset) for _, h, _ in batches] == [
        (7, 9, 0, 9), (8, 9, 1, 19)]
    assert (log.end_offset_for_epoch(1), log.end_offset_for_epoch(2)) == epochs_before
    log.close()
    log = Log(tmp_path / "idempotent-0", compact_config())
    duplicate = log.append_as_leader(keyed_batch([(b"shared", b"from-7-9")], producer_id=7, producer_epoch=0,
                                                 base_sequence=9))
    assert duplicate.duplicate and duplicate.first_offset == 9
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(keyed_batch([(b"k", b"v")], producer_id=8, producer_epoch=0, base_sequence=12))
    assert not log.append_as_leader(keyed_batch([(b"k", b"v")], producer_id=8, producer_epoch=0,
                                                base_sequence=10)).duplicate
    log.close()


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_batches_are_recompressed_with_their_codec(tmp_path, codec):
    log = Log(tmp_path / "compressed-0", compact_config(segment_bytes=1 << 20))
    for round_ in range(3):
        keys = [b"key-%d" % i for i in range(round_, 10)]
        log.append_as_leader(encode_batch([b"value-%d-%s" % (round_, k) * 5 for k in keys], keys,
                                          compression=codec, producer_id=3, producer_epoch=0,
                                          base_sequence=log.log_end_offset))
    ready_to_clean(log)
    assert cleaner_for(log).clean_once()
    batches = read_batches_of(log)
    assert [h.attributes & COMPRESSION_MASK for _, h, _ in batches] == [codec] * 3
    assert [(h.base_offset, h.last_offset_delta, h.base_sequence, h.record_count) for _, h, _ in batches] == [
        (0, 9, 0, 1), (10, 8, 10, 1), (19, 7, 19, 8)]
    assert [(r.offset, r.key) for _, _, records in batches for r in records] == [
        (0, b"key-0"), (10, b"key-1")] + [(19 + i, b"key-%d" % (i + 2)) for i in range(8)]
    log.close()


def test_records_without_a_key_are_removed(log):
    """Written before the topic became compacted (a compacted log refuses them at produce)."""
    log.config.cleanup_policy = frozenset({"delete"})
    write_updates(log, [(None, b"no key"), (b"k", b"v")])
    log.config.cleanup_policy = frozenset({"compact"})
    ready_to_clean(log)
    cleaner = cleaner_for(log)
    assert cleaner.clean_once()
    assert read_records(log) == [(1, b"k", b"v")]
    assert cleaner.last_stats.invalid_messages == 1


def test_a_log_without_the_compact_policy_is_left_alone(tmp_path):
    log = Log(tmp_path / "deleting-0", compact_config(cleanup_policy=frozenset({"delete"})))
    written = write_updates(log, updates(keys=2, rounds=10))
    ready_to_clean(log)
    assert not cleaner_for(log).clean_once()
    assert read_records(log) == written
    log.close()


def test_stats_report_the_dirty_ratio_and_the_bytes_cleaned(log):
    write_updates(log, updates(keys=2, rounds=50))
    ready_to_clean(log)
    cleaner = cleaner_for(log)
    before = cleaner.stats()
    assert before["logs"][("compacted", 0)]["dirty_ratio"] == 1.0 and before["max_dirty_percent"] == 100.0
    cleaner.clean_once()
    after = cleaner.stats()
    per_log = after["logs"][("compacted", 0)]
    assert per_log["dirty_ratio"] == 0.0 and per_log["passes"] == 1
    assert per_log["bytes_read"] - per_log["bytes_written"] == per_log["bytes_recovered"] > 0
    assert 0 < after["cleaner_recopy_percent"] < 100 and after["uncleanable_partitions_count"] == 0


def test_the_throttler_sleeps_to_keep_the_rate():
    clock = [0.0]
    slept = []
    throttler = Throttler(1000.0, clock=lambda: clock[0], sleep=lambda s: (slept.append(s), clock.__setitem__(0, clock[0] + s)))
    clock[0] = 0.5
    throttler.maybe_throttle(1000)
    assert slept == [pytest.approx(0.5)]
    clock[0] += 2
    throttler.maybe_throttle(1000)
    assert len(slept) == 1


def test_cleaner_config_from_the_broker_properties():
    config = CleanerConfig.from_properties({
        "log.cleaner.threads": 2, "log.cleaner.dedupe.buffer.size": 1 << 20, "log.cleaner.io.buffer.size": 4096,
        "log.cleaner.io.max.bytes.per.second": 1e6, "log.cleaner.backoff.ms": 100, "log.cleaner.enable": False,
        "testing.pause.at": "before-swap", "testing.pause.file": "/tmp/paused"})
    assert config == CleanerConfig(2, 1 << 20, 4096, 1e6, 100, False,
                                   faults=Faults("before-swap", "/tmp/paused"))


def test_the_prometheus_collector_exposes_kafkas_cleaner_gauges_and_per_log_values(log):
    from prometheus_client import CollectorRegistry, generate_latest

    from broker.log.cleaner_metrics import LogCleanerMetrics

    write_updates(log, updates(keys=2, rounds=50))
    ready_to_clean(log)
    cleaner = cleaner_for(log)
    cleaner.clean_once()
    registry = CollectorRegistry()
    registry.register(LogCleanerMetrics(cleaner))
    text = generate_latest(registry).decode()
    recovered = cleaner.stats()["logs"][("compacted", 0)]["bytes_recovered"]
    assert f'kafka_log_logcleaner_bytes_recovered_total{{partition="0",topic="compacted"}} {float(recovered)}' in text
    for name in ("kafka_log_logcleaner_max_buffer_utilization_percent", "kafka_log_logcleaner_cleaner_recopy_percent",
                 "kafka_log_logcleaner_max_clean_time_secs", "kafka_log_logcleanermanager_max_dirty_percent",
                 "kafka_log_logcleanermanager_time_since_last_run_ms",
                 "kafka_log_logcleanermanager_uncleanable_partitions_count", "kafka_log_logcleaner_dirty_ratio"):
        assert f"\n{name}" in text


def test_a_read_in_flight_stays_valid_across_the_swap(log):
    written = write_updates(log, updates(keys=2, rounds=20))
    ready_to_clean(log)
    with log.read(0, 1 << 20) as in_flight:
        assert cleaner_for(log).clean_once()
        # file.delete.delay.ms is 0 here: the replaced segment's files are gone, its descriptor still reads.
        assert not any(name.endswith(".deleted") for name in os.listdir(log.dir))
        data = in_flight.read_bytes()
    assert [(h.base_offset, decode_batch(data, pos)[1][0].value) for pos, h in iter_batches(data)][:3] == [
        (offset, value) for offset, _, value in written[:3]]
    assert read_records(log) == written[-2:]


@pytest.mark.parametrize("settings, threads", [({"threads": 2}, 2), ({"threads": 0}, 0),
                                               ({"threads": 2, "enable": False}, 0)])
def test_startup_starts_log_cleaner_threads_unless_disabled(log, settings, threads):
    cleaner = cleaner_for(log, **settings)
    cleaner.startup()
    try:
        running = [t.name for t in threading.enumerate() if t.name.startswith("kafka-log-cleaner-thread-")]
    finally:
        cleaner.shutdown()
    assert sorted(running) == [f"kafka-log-cleaner-thread-{i}" for i in range(threads)]
    assert not any(t.name.startswith("kafka-log-cleaner-thread-") for t in threading.enumerate())


@pytest.mark.parametrize("clean_shutdown", [True, False])
def test_a_cleaned_log_loads_with_its_gaps_after_a_clean_or_unclean_shutdown(tmp_path, clean_shutdown, monkeypatch):
    config = compact_config(index_interval_bytes=4096)  # no index entry: a scan from the segment base
    log = Log(tmp_path / "reloaded-0", config)
    written = write_updates(log, updates(keys=5, rounds=40))
    ready_to_clean(log)
    assert cleaner_for(log).clean_once()
    records, bases, end = read_records(log), log.segment_base_offsets(), log.log_end_offset
    log.flush()
    log.close()
    rebuilt = []
    rebuild = LogSegment.rebuild_indexes
    monkeypatch.setattr(LogSegment, "rebuild_indexes", lambda segment: rebuilt.append(segment) or rebuild(segment))
    reloaded = Log(tmp_path / "reloaded-0", config, recovery_point=end, last_shutdown_clean=clean_shutdown)
    assert rebuilt == []  # the gaps do not make the indexes look damaged
    try:
        assert (read_records(reloaded), reloaded.segment_base_offsets(), reloaded.log_end_offset) == (records, bases, end)
        assert records == compacted(written)
        for offset, key, value in records:
            with reloaded.read(offset, 1) as fetched:
                assert int.from_bytes(fetched.read_bytes()[:8], "big") == offset
    finally:
        reloaded.close()


def test_a_pass_failing_without_a_message_is_named_by_its_type(log, caplog):
    write_updates(log, updates(keys=5, rounds=100))
    ready_to_clean(log)

    def fail(to_clean):
        raise AssertionError()

    with caplog.at_level(logging.ERROR, logger="broker.log.log_cleaner"):
        assert cleaner_for(log).clean_filthiest_log(fail)
    assert caplog.messages == ["cleaning of compacted-0 failed, the log is left uncleaned: AssertionError"]
