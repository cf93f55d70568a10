"""The checker of the transactional consume-transform-produce run: exactly once, as read_committed readers see it.

Each output value is ``<input partition>:<input offset>|<tag>`` (see txn_worker), the tag naming the worker
incarnation and transaction that wrote it. Against the input logs, the final read_committed output logs, what
a read_committed reader saw during the run, the tags of the transactions the workers aborted, and the group's
final committed offsets, it reports:

- lost: an input record with no output record;
- duplicated: an input record with more than one output record (in the final logs, or read twice live);
- reordered / misplaced: outputs of a partition not in input order, or not in the input's partition;
- aborted_visible: an output record of an aborted transaction that a read_committed reader saw;
- unknown: an output record naming no input record; gone: read live but missing from the final log;
- offsets: the committed offset of an input partition that is not where its outputs end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

PROBE_PREFIX = "probe-"


def parse_output(value: str) -> tuple[int, int, str] | None:
    """(input partition, input offset, tag) of an output value; None for a nemesis probe."""
    if value.startswith(PROBE_PREFIX):
        return None
    source, tag = value.split("|", 1)
    partition, offset = source.split(":")
    return int(partition), int(offset), tag


@dataclass
class TxnCheckResult:
    """Every anomaly found, by kind; valid when there is none."""

    inputs: int = 0
    outputs: int = 0
    live_reads: int = 0
    anomalies: dict[str, list[str]] = field(default_factory=lambda: {
        kind: [] for kind in ("lost", "duplicated", "reordered", "misplaced", "aborted_visible", "unknown", "gone",
                              "offsets")})

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self) -> str:
        found = {kind: items for kind, items in self.anomalies.items() if items}
        head = f"{self.inputs} inputs, {self.outputs} outputs, {self.live_reads} live reads"
        if not found:
            return f"{head}: exactly once"
        return head + "; " + "; ".join(f"{kind} {len(items)}: {items[:5]}" for kind, items in found.items())


def check_exactly_once(input_offsets: Mapping[int, Iterable[int]], output_logs: Mapping[int, Iterable[str]],
                       live_reads: Iterable[tuple[int, str]], aborted_tags: set[str],
                       committed: Mapping[int, int]) -> TxnCheckResult:
    """Check a run; ``output_logs`` hold the final read_committed values per output partition in offset order,
    ``live_reads`` the (output partition, value) pairs a reader saw during the run, ``committed`` the group's
    final offset per input partition."""
    result = TxnCheckResult()
    wanted = {p: set(offsets) for p, offsets in input_offsets.items()}
    result.inputs = sum(len(o) for o in wanted.values())
    seen: dict[tuple[int, int], int] = {}
    final_values: set[str] = set()
    ends: dict[int, int] = {}
    for out_partition, values in output_logs.items():
        last = -1
        for value in values:
            parsed = parse_output(value)
            if parsed is None:
                continue
            final_values.add(value)
            result.outputs += 1
            partition, offset, tag = parsed
            if partition != out_partition:
                result.anomalies["misplaced"].append(f"{value} in output partition {out_partition}")
            if offset not in wanted.get(partition, ()):
                result.anomalies["unknown"].append(value)
            if tag in aborted_tags:
                result.anomalies["aborted_visible"].append(value)
            seen[(partition, offset)] = seen.get((partition, offset), 0) + 1
            if seen[(partition, offset)] == 2:
                result.anomalies["duplicated"].append(f"{partition}:{offset}")
            if offset < last:
                result.anomalies["reordered"].append(f"{value} after input offset {last}")
            last = max(last, offset)
        ends[out_partition] = last + 1
    for partition, offsets in wanted.items():
        for offset in sorted(offsets):
            if (partition, offset) not in seen:
                result.anomalies["lost"].append(f"{partition}:{offset}")
        end = max(offsets, default=-1) + 1
        if committed.get(partition, 0) != end or ends.get(partition, 0) != end:
            result.anomalies["offsets"].append(f"input partition {partition}: committed {committed.get(partition)}, "
                                               f"outputs end at input offset {ends.get(partition, 0)}, input ends "
                                               f"at {end}")
    live_seen: set[tuple[int, int]] = set()
    for out_partition, value in live_reads:
        parsed = parse_output(value)
        if parsed is None:
            continue
        result.live_reads += 1
        partition, offset, tag = parsed
        if tag in aborted_tags:
            result.anomalies["aborted_visible"].append(f"{value} (read live)")
        if (partition, offset) in live_seen:
            result.anomalies["duplicated"].append(f"{partition}:{offset} (read live twice)")
        live_seen.add((partition, offset))
        if value not in final_values:
            result.anomalies["gone"].append(value)
    return result
