"""ReplicaManager turns a partition's storage errors into KAFKA_STORAGE_ERROR for that partition
instead of raising into the request handler (which would close the client's connection)."""

from __future__ import annotations

import os
import resource

import pytest
from tests.unit.test_log_support import make_batch

from broker.log import LogConfig, LogManager
from broker.replica_manager import ReplicaManager
from pipeline.protocol.errors import ErrorCode


@pytest.fixture
def replicas(tmp_path):
    manager = LogManager([tmp_path / "logs"], LogConfig())
    manager.startup()
    replica_manager = ReplicaManager(manager)
    for index in (0, 1):
        replica_manager.make_leader("t", index)
        assert replica_manager.append_records("t", index, make_batch(3)).error_code == ErrorCode.NONE
    yield replica_manager
    manager.shutdown()


def lowest_free_fd() -> int:
    fd = os.open(os.devnull, os.O_RDONLY)  # the kernel hands out the lowest free number
    os.close(fd)
    return fd


def test_descriptors_exhausted_while_reading_answer_a_storage_error(replicas):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free_fd(), hard))  # the next dup fails with EMFILE
    try:
        result = replicas.read("t", 0, 0, 1 << 20, True)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR and result.size == 0
    for index in (0, 1):  # descriptors available again: both partitions serve
        served = replicas.read("t", index, 0, 1 << 20, True)
        assert (served.error_code, served.high_watermark) == (ErrorCode.NONE, 3) and served.size > 0
        served.release()
