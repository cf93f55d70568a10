"""A compacted log refuses records without a key (Kafka's INVALID_RECORD), compressed or not; other logs take them."""

from __future__ import annotations

import pytest
from tests.unit.broker.log.log_support import open_log

from broker.log import LogConfig
from broker.log.errors import InvalidRecordError
from pipeline.records import encode_batch

COMPACT = frozenset({"compact"})


@pytest.mark.parametrize("compression", [0, 1, 3])
def test_a_compacted_log_refuses_keyless_records_and_takes_keyed_ones_and_tombstones(tmp_path, compression):
    log = open_log(tmp_path, LogConfig(cleanup_policy=COMPACT))
    try:
        with pytest.raises(InvalidRecordError, match="without a key") as info:
            log.append_as_leader(encode_batch([b"a", b"b", b"c"], [b"k", None, b"k"], compression=compression))
        assert info.value.error_code == 87 and info.value.record_errors == [(1, "the record has no key")]
        assert log.log_end_offset == 0
        assert log.append_as_leader(encode_batch([b"v", None], [b"k1", b"k2"], compression=compression)).last_offset == 1
    finally:
        log.close()


def test_a_log_that_is_not_compacted_takes_keyless_records(tmp_path):
    log = open_log(tmp_path, LogConfig(cleanup_policy=frozenset({"delete"})))
    try:
        assert log.append_as_leader(encode_batch([b"a"], [None])).first_offset == 0
    finally:
        log.close()
