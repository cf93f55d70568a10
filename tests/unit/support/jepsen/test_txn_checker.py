"""The transactional run's checker finds each anomaly in a hand-made run, and nothing in a clean one."""

from __future__ import annotations

import pytest

from tests.support.jepsen.txn_checker import check_exactly_once

INPUTS = {0: range(4), 1: range(2)}


def clean() -> dict:
    outputs = {0: ["0:0|1-0", "0:1|1-0", "probe-3", "0:2|2-0", "0:3|2-1"], 1: ["1:0|1-0", "1:1|1-0"]}
    live = [(0, "0:0|1-0"), (0, "0:1|1-0"), (1, "1:0|1-0")]
    return {"input_offsets": INPUTS, "output_logs": outputs, "live_reads": live, "aborted_tags": {"1-1"},
            "committed": {0: 4, 1: 2}}


def anomalies(run: dict) -> dict[str, int]:
    result = check_exactly_once(**run)
    return {kind: len(items) for kind, items in result.anomalies.items() if items}


def test_a_clean_run_is_exactly_once() -> None:
    result = check_exactly_once(**clean())
    assert result.valid, result.summary()
    assert (result.inputs, result.outputs, result.live_reads) == (6, 6, 3)


@pytest.mark.parametrize("change, expected", [
    (lambda r: r["output_logs"][0].remove("0:2|2-0"), {"lost": 1}),
    (lambda r: r["output_logs"][0].remove("0:3|2-1"), {"lost": 1, "offsets": 1}),
    (lambda r: r["output_logs"][0].__setitem__(slice(0, 2), ["0:1|1-0", "0:0|1-0"]), {"reordered": 1}),
    (lambda r: r["output_logs"][0].append("0:3|3-0"), {"duplicated": 1}),
    (lambda r: r["output_logs"][0].insert(2, "0:1|1-1"), {"duplicated": 1, "aborted_visible": 1}),
    (lambda r: r["live_reads"].append((0, "0:2|1-1")), {"aborted_visible": 1, "gone": 1}),
    (lambda r: r["live_reads"].append((0, "0:1|1-0")), {"duplicated": 1}),
    (lambda r: r["output_logs"][1].append("0:9|1-0"), {"misplaced": 1, "unknown": 1, "offsets": 1}),
    (lambda r: r["committed"].update({1: 1}), {"offsets": 1}),
])
def test_each_anomaly_is_found(change, expected) -> None:
    run = clean()
    change(run)
    found = anomalies(run)
    for kind, count in expected.items():
        assert found.get(kind) == count, found
    assert set(found) == set(expected), found
