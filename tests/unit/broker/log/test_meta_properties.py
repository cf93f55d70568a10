"""meta.properties: a log dir records its cluster and broker id once and refuses others afterwards."""

from __future__ import annotations

import pytest

from broker.log.meta_properties import InconsistentLogDirError, check_and_claim, read_meta_properties


def test_first_use_records_the_ids_and_the_same_ids_pass_again(tmp_path):
    check_and_claim([tmp_path], "cluster-a", 1)
    assert read_meta_properties(tmp_path) == {"version": "0", "cluster.id": "cluster-a", "broker.id": "1"}
    check_and_claim([tmp_path], "cluster-a", 1)


def test_another_cluster_or_broker_id_is_refused_and_nothing_is_rewritten(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    check_and_claim([first, second], "cluster-a", 1)
    with pytest.raises(InconsistentLogDirError, match="does not match cluster.id=cluster-a"):
        check_and_claim([first, second], "cluster-b", 1)
    with pytest.raises(InconsistentLogDirError, match="broker.id 2 does not match broker.id=1"):
        check_and_claim([second], "cluster-a", 2)
    assert read_meta_properties(second)["cluster.id"] == "cluster-a"
