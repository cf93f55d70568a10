"""mirror.transactions without clusters: the exactly-once settings, where a claimed partition starts (the target's
offset, the source's once), which writers are fenced first, and what a commit puts in the transaction."""

from __future__ import annotations

from typing import Any

import pytest

from mirror.config import MirrorConfig
from mirror.transactions import SourceTransactions, offset_metadata, writer_of
from pipeline.client.group_admin import OffsetAndMetadata
from pipeline.config import ConfigError

BASE = {"source.clusters": "dc1=zk1:2181/dc1", "target.zookeeper.connect": "zk:2181/offline", "whitelist": "ev.*",
        "exactly.once": "true", "process.id": "m1"}


class FakeProducer:
    """Records the transactional calls of every producer made, by transactional id."""

    def __init__(self, calls: list[tuple[Any, ...]], config: dict[str, Any], handler: Any = None) -> None:
        self.calls = calls
        self.id = config["transactional.id"]
        self.config = config

    def init_transactions(self, timeout: float | None = None) -> None:
        self.calls.append(("init", self.id))

    def begin_transaction(self) -> None:
        self.calls.append(("begin", self.id))

    def send(self, data: Any) -> None:
        self.calls.append(("send", self.id, [(d.topic, d.key, [m.value for m in d.messages]) for d in data]))

    def send_offsets_to_transaction(self, offsets: Any, group: str, metadata: Any, timeout: float | None) -> None:
        self.calls.append(("offsets", self.id, group, dict(offsets), dict(metadata)))

    def commit_transaction(self, timeout: float | None = None) -> None:
        self.calls.append(("commit", self.id))

    def abort_transaction(self, timeout: float | None = None) -> None:
        self.calls.append(("abort", self.id))

    def close(self, timeout: float | None = None) -> None:
        self.calls.append(("close", self.id))


class FakeAdmin:
    """The target's committed offsets of one group."""

    def __init__(self, committed: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        self.committed = committed
        self.fetches = 0

    def fetch_offsets(self, group: str, partitions: list[tuple[str, int]], *, require_stable: bool) -> dict:
        self.fetches += 1
        assert group == "mirror.dc1" and require_stable
        return {tp: o for tp, o in self.committed.items() if tp in partitions}


def transactions(admin: FakeAdmin, calls: list) -> SourceTransactions:
    return SourceTransactions("dc1", MirrorConfig(BASE), None, None, admin,  # type: ignore[arg-type]
                              producer_factory=lambda config, handler=None: FakeProducer(calls, config, handler))


def test_the_settings_name_the_transactional_id_and_the_target_group_per_source() -> None:
    config = MirrorConfig(BASE)
    assert config.exactly_once and config.transactional_id("dc1") == "mirror.dc1.m1"
    assert config.target_group("dc1") == "mirror.dc1"
    assert config.transactional_producer_config("dc1")["transactional.id"] == "mirror.dc1.m1"
    assert MirrorConfig({**BASE, "transactional.id.prefix": "eos"}).transactional_id("dc1") == "eos.dc1.m1"
    assert not MirrorConfig({**BASE, "exactly.once": "false"}).exactly_once
    connect_spelling = {k: v for k, v in BASE.items() if k != "exactly.once"}
    assert MirrorConfig({**connect_spelling, "exactly.once.support": "enabled"}).exactly_once
    assert not MirrorConfig({**connect_spelling, "exactly.once.support": "disabled"}).exactly_once
    with pytest.raises(ConfigError, match="set by the mirror"):
        MirrorConfig({**BASE, "producer.transactional.id": "mine"})


def test_offset_metadata_names_the_writer_and_whether_it_let_the_partition_go() -> None:
    assert writer_of(offset_metadata("mirror.dc1.m1", False)) == ("mirror.dc1.m1", False)
    assert writer_of(offset_metadata("mirror.dc1.m1", True)) == ("mirror.dc1.m1", True)
    assert writer_of("") == (None, True) and writer_of(None) == (None, True)


def test_a_partition_starts_at_its_target_offset_and_at_its_source_offset_only_without_one() -> None:
    calls: list = []
    admin = FakeAdmin({("ev", 0): OffsetAndMetadata(40, "released:mirror.dc1.m2")})
    txn = transactions(admin, calls)
    starts = txn.start_offsets({("ev", 0): 10, ("ev", 1): 7, ("ev", 2): None})
    assert starts == {("ev", 0): 40, ("ev", 1): 7, ("ev", 2): None}
    assert txn.owned == {("ev", 0), ("ev", 1), ("ev", 2)}
    # A released partition's writer is not fenced.
    assert admin.fetches == 1 and [c for c in calls if c[0] == "init"] == []


def test_an_unreleased_writer_of_another_process_is_fenced_before_the_offset_is_read_again() -> None:
    calls: list = []
    admin = FakeAdmin({("ev", 0): OffsetAndMetadata(40, "mirror.dc1.m2"),
                       ("ev", 1): OffsetAndMetadata(5, "mirror.dc1.m1"),
                       ("ev", 2): OffsetAndMetadata(9, "mirror.dc1.m2")})
    txn = transactions(admin, calls)
    assert txn.start_offsets({("ev", 0): 1, ("ev", 1): 1, ("ev", 2): 1}) == {("ev", 0): 40, ("ev", 1): 5, ("ev", 2): 9}
    # Fenced once, by a producer of that id closed after its InitProducerId; our own id is never fenced here.
    assert calls == [("init", "mirror.dc1.m2"), ("close", "mirror.dc1.m2")]
    assert admin.fetches == 2


def test_a_commit_holds_the_audit_counts_and_the_changed_offsets_and_opens_the_next_transaction() -> None:
    calls: list = []
    txn = transactions(FakeAdmin({}), calls)
    txn.start()
    txn.start_offsets({("ev", 0): None, ("ev", 1): None})
    calls.clear()
    txn.sent = 3
    written = txn.commit({("ev", 0): 10, ("ev", 1): 4}, [(b"ev", b"count")], "AuditCount")
    assert written == {("ev", 0): 10, ("ev", 1): 4}
    assert calls == [("send", "mirror.dc1.m1", [("AuditCount", b"ev", [b"count"])]),
                     ("offsets", "mirror.dc1.m1", "mirror.dc1", {("ev", 0): 10, ("ev", 1): 4},
                      {("ev", 0): "mirror.dc1.m1", ("ev", 1): "mirror.dc1.m1"}),
                     ("commit", "mirror.dc1.m1"), ("begin", "mirror.dc1.m1")]
    calls.clear()
    # Nothing sent, nothing moved: no transaction.
    assert txn.commit({("ev", 0): 10, ("ev", 1): 4}, [], "AuditCount") == {} and calls == []
    # A release marks the partition's last commit, even when its offset did not move.
    assert txn.commit({("ev", 0): 10, ("ev", 1): 4}, [], "AuditCount", released=[("ev", 1)]) == {("ev", 1): 4}
    assert calls[0] == ("offsets", "mirror.dc1.m1", "mirror.dc1", {("ev", 1): 4}, {("ev", 1): "released:mirror.dc1.m1"})
    txn.release([("ev", 1)])
    assert txn.owned == {("ev", 0)}
