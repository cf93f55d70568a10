"""The Jepsen-style checker finds each anomaly in a hand-made history, and nothing in a clean one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.jepsen.checker import ANOMALIES, check
from tests.support.jepsen.history import History


def clean_history() -> History:
    """Two producers on partition 0, one on partition 1; everything acknowledged, read and in the logs."""
    history = History()
    for n in range(3):
        for producer in ("a", "b"):
            value = f"{producer}-{n}"
            history.send(producer, 0, value)
    history.send("c", 1, "c-0")
    log0 = [(offset, value) for offset, value in enumerate(["a-0", "b-0", "a-1", "b-1", "a-2", "b-2"])]
    for offset, value in log0:
        history.ack(value, offset)
        history.read("reader", 0, offset, value)
    history.ack("c-0", 0)
    history.set_final(0, log0)
    history.set_final(1, [(0, "c-0")])
    return history


def only(history: History, anomaly: str, count: int = 1, partition: int = 0) -> None:
    result = check(history)
    assert not result.valid
    assert result.partitions[partition].counts[anomaly] == count, result.summary()
    assert result.partitions[partition].examples[anomaly]
    assert {name: result.total(name) for name in ANOMALIES if result.total(name)} == {anomaly: count}, \
        result.summary()


def test_clean_history_passes() -> None:
    result = check(clean_history())
    assert result.valid, result.summary()
    assert result.totals() == {"sent": 7, "acknowledged": 7, "unacknowledged_present": 0, "reads": 6,
                               "final_length": 7, **dict.fromkeys(ANOMALIES, 0)}
    assert result.summary().startswith("valid")


def test_lost_acknowledged_message() -> None:
    history = clean_history()
    history.send("a", 0, "a-3")
    history.ack("a-3", 6)
    only(history, "lost")
    assert "a-3" in check(history).summary()


def test_failed_or_unanswered_send_missing_is_not_lost_and_present_is_counted() -> None:
    history = clean_history()
    history.send("a", 0, "a-3")
    history.fail("a-3", "timed out")
    history.send("b", 0, "b-3")
    history.set_final(0, history.final[0] + [(6, "b-3")])
    result = check(history)
    assert result.valid, result.summary()
    assert result.total("unacknowledged_present") == 1


def test_duplicated_value() -> None:
    history = clean_history()
    history.set_final(0, history.final[0] + [(6, "b-2")])
    only(history, "duplicated")


def test_reordered_values_of_one_producer() -> None:
    history = clean_history()
    log = [(0, "a-0"), (1, "b-0"), (2, "a-2"), (3, "b-1"), (4, "a-1"), (5, "b-2")]
    history.set_final(0, log)
    history.acks.update({value: offset for offset, value in log})
    history.reads = [r for r in history.reads if r.offset < 2]
    only(history, "reordered")
    assert "a-1" in check(history).partitions[0].examples["reordered"][0]


def test_interleaving_of_two_producers_is_not_a_reorder() -> None:
    history = clean_history()
    log = [(0, "b-0"), (1, "b-1"), (2, "a-0"), (3, "b-2"), (4, "a-1"), (5, "a-2")]
    history.set_final(0, log)
    history.acks.update({value: offset for offset, value in log})
    history.reads = []
    assert check(history).valid


def test_thin_air_in_log_and_in_reads() -> None:
    history = clean_history()
    history.set_final(0, history.final[0] + [(6, "z-9")])
    only(history, "thin_air")
    history = clean_history()
    history.read("reader", 1, 0, "c-0")
    history.read("reader", 1, 1, "a-0")  # sent, but to partition 0
    result = check(history)
    assert result.partitions[1].counts["thin_air"] == 1
    assert result.partitions[1].counts["phantom"] == 1


def test_phantom_read_of_a_message_that_disappeared() -> None:
    history = clean_history()
    history.send("a", 0, "a-3")
    history.fail("a-3", "leader died")
    history.read("reader", 0, 6, "a-3")  # read, then truncated away: the log ends at offset 6
    only(history, "phantom")
    history = clean_history()
    history.send("a", 0, "a-3")
    history.read("reader", 0, 5, "a-3")  # read where the final log has b-2
    history.set_final(0, history.final[0] + [(6, "a-3")])
    only(history, "phantom")


def test_acknowledgement_at_a_wrong_offset() -> None:
    history = clean_history()
    history.ack("a-2", 5)
    only(history, "wrong_offset")
    history = clean_history()
    history.ack("a-2", None)  # the client did not say where: nothing to compare
    assert check(history).valid


def test_values_must_be_unique_and_history_dumps(tmp_path: Path) -> None:
    history = clean_history()
    with pytest.raises(ValueError):
        history.send("a", 0, "a-0")
    history.dump(tmp_path / "history.json")
    document = json.loads((tmp_path / "history.json").read_text())
    assert len(document["sends"]) == 7 and document["final"]["1"] == [[0, "c-0"]]


def test_hard_bounces_are_spread_evenly() -> None:
    from tests.support.jepsen.workload import is_hard
    assert [is_hard(n, 0.5) for n in range(6)] == [False, True] * 3
    assert sum(is_hard(n, 0.25) for n in range(200)) == 50
    assert not any(is_hard(n, 0.0) for n in range(10)) and all(is_hard(n, 1.0) for n in range(10))
