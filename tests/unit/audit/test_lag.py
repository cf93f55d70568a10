"""audit.lag: the offsets every group committed, read from a ZooKeeper tree, and each group's lag behind the
partitions' latest offsets."""

from __future__ import annotations

from kazoo.exceptions import NoNodeError

from audit.lag import committed_offsets, group_lags, source_offset_groups, without_groups
from pipeline.zk import layout


class FakeZooKeeper:
    """The get_children/get of a KazooClient over a dict of znode path -> data."""

    def __init__(self, nodes: dict[str, bytes]) -> None:
        self.nodes = nodes

    def get_children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        if path not in self.nodes and not any(name.startswith(prefix) for name in self.nodes):
            raise NoNodeError(path)
        return sorted({name[len(prefix):].split("/")[0] for name in self.nodes if name.startswith(prefix)})

    def get(self, path: str) -> tuple[bytes, None]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path], None


def test_committed_offsets_are_read_in_both_forms_and_unreadable_ones_are_skipped() -> None:
    zk = FakeZooKeeper({
        layout.offset_path("etl", "clicks", 0): b"42",
        layout.offset_path("etl", "clicks", 1): layout.offset_value(layout.OffsetValue(7, "meta")),
        layout.offset_path("mirror", "views", 3): b"not an offset",
        layout.offset_path("mirror", "views", 4): b"9",
        f"{layout.CONSUMERS}/registered-only/ids/host-1": b"{}",
    })
    assert committed_offsets(zk) == {("etl", "clicks", 0): 42, ("etl", "clicks", 1): 7, ("mirror", "views", 4): 9}


def test_no_consumers_at_all_is_no_offsets() -> None:
    assert committed_offsets(FakeZooKeeper({})) == {}


def test_a_lag_is_the_latest_offset_minus_the_committed_one_never_negative_and_unknown_ends_are_left_out() -> None:
    asked: list[str] = []

    def ends_of(topic: str) -> dict[int, int | None]:
        asked.append(topic)
        return {"clicks": {0: 50, 1: 5, 2: None}, "views": {}}[topic]

    committed = {("etl", "clicks", 0): 42, ("etl", "clicks", 1): 7, ("etl", "clicks", 2): 1,
                 ("mirror", "clicks", 0): 50, ("mirror", "views", 0): 3}
    assert group_lags(committed, ends_of) == {("etl", "clicks", 0): 8, ("etl", "clicks", 1): 0,
                                              ("mirror", "clicks", 0): 0}
    assert asked == ["clicks", "views"]  # each topic's ends are asked for once


def test_an_exactly_once_mirrors_source_offsets_in_the_target_are_not_a_lag_of_the_target() -> None:
    clusters = ["dc1", "dc2", "offline"]
    assert source_offset_groups("mirror", clusters, "offline") == {"mirror.dc1", "mirror.dc2"}
    assert source_offset_groups("mirror", clusters, "dc1") == {"mirror.dc2", "mirror.offline"}
    assert source_offset_groups("", clusters, "offline") == set()
    committed = {("mirror.dc1", "clicks", 0): 900, ("mirror.dc2", "clicks", 0): 800, ("etl", "clicks", 0): 40,
                 ("mirror", "clicks", 0): 30}
    kept = without_groups(committed, source_offset_groups("mirror", clusters, "offline"))
    assert kept == {("etl", "clicks", 0): 40, ("mirror", "clicks", 0): 30}
    assert group_lags(kept, lambda topic: {0: 50}) == {("etl", "clicks", 0): 10, ("mirror", "clicks", 0): 20}
