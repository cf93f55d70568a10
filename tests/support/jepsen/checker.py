"""The checker: what went wrong in a history, per partition, Jepsen style (counts plus a few examples).

Anomalies, each counted per partition against the partition's final log (read from its start after the run):

- lost: acknowledged, but not in the final log;
- duplicated: a value more than once in the final log;
- reordered: a value of one producer before one it sent earlier (first occurrences, in offset order);
- thin_air: a value in the final log or read by a consumer that nobody sent to this partition;
- phantom: a consumer read a value at an offset where the final log holds another one or nothing
  (it saw a message that later disappeared);
- wrong_offset: acknowledged at an offset where the final log holds another value, while the value is
  elsewhere in the log (an acknowledgement that lied about the position).

Besides the anomalies it counts what is fine: sent, acknowledged, failed sends found in the log anyway
(a failed send is indeterminate), consumer reads and the final log's length.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .history import History, Read, Send

ANOMALIES = ("lost", "duplicated", "reordered", "thin_air", "phantom", "wrong_offset")
EXAMPLES = 5


@dataclass
class PartitionResult:
    """One partition's counts; ``examples`` holds up to EXAMPLES of each anomaly."""

    partition: int
    sent: int = 0
    acknowledged: int = 0
    unacknowledged_present: int = 0
    reads: int = 0
    final_length: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: {name: [] for name in ANOMALIES})

    def note(self, anomaly: str, example: str) -> None:
        self.counts[anomaly] += 1
        if len(self.examples[anomaly]) < EXAMPLES:
            self.examples[anomaly].append(example)


@dataclass
class CheckResult:
    """Every partition's result and the totals over all of them; ``valid`` when no anomaly was found."""

    partitions: dict[int, PartitionResult]

    def total(self, name: str) -> int:
        """The sum of an anomaly's count or of a plain figure (sent, acknowledged, reads, ...) over partitions."""
        if name in ANOMALIES:
            return sum(p.counts[name] for p in self.partitions.values())
        return sum(getattr(p, name) for p in self.partitions.values())

    @property
    def valid(self) -> bool:
        return not any(self.total(name) for name in ANOMALIES)

    def totals(self) -> dict[str, int]:
        figures = ("sent", "acknowledged", "unacknowledged_present", "reads", "final_length")
        return {name: self.total(name) for name in figures + ANOMALIES}

    def summary(self) -> str:
        """A few lines: the totals, then each anomalous partition's counts and examples."""
        lines = ["valid" if self.valid else "INVALID",
                 " ".join(f"{name}={value}" for name, value in self.totals().items())]
        for number, result in sorted(self.partitions.items()):
            for name in ANOMALIES:
                if result.counts[name]:
                    lines.append(f"  partition {number}: {name} {result.counts[name]}, e.g. "
                                 + "; ".join(result.examples[name]))
        return "\n".join(lines)


def check(history: History) -> CheckResult:
    """Check every partition that was sent to, read, or has a final log."""
    sends_by_partition: dict[int, dict[str, Send]] = {}
    for sent in history.sends.values():
        sends_by_partition.setdefault(sent.partition, {})[sent.value] = sent
    reads_by_partition: dict[int, list[Read]] = {}
    for read in history.reads:
        reads_by_partition.setdefault(read.partition, []).append(read)
    numbers = set(sends_by_partition) | set(reads_by_partition) | set(history.final)
    return CheckResult({number: _check_partition(number, sends_by_partition.get(number, {}),
                                                 reads_by_partition.get(number, []),
                                                 history.final.get(number, []), history)
                        for number in sorted(numbers)})


def _check_partition(number: int, sends: dict[str, Send], reads: list[Read], final: list[tuple[int, str]],
                     history: History) -> PartitionResult:
    result = PartitionResult(number, sent=len(sends), reads=len(reads), final_length=len(final))
    at_offset = dict(final)
    in_log = Counter(value for _, value in final)
    first_offset: dict[str, int] = {}
    for offset, value in final:
        first_offset.setdefault(value, offset)
    for value, sent in sends.items():
        if value in history.acks:
            result.acknowledged += 1
            offset = history.acks[value]
            if value not in in_log:
                result.note("lost", f"{value} (acknowledged at offset {offset})")
            elif offset is not None and at_offset.get(offset) != value:
                result.note("wrong_offset", f"{value} acknowledged at {offset}, found at {first_offset[value]}")
        elif value in in_log:
            result.unacknowledged_present += 1
    for value, times in in_log.items():
        if times > 1:
            result.note("duplicated", f"{value} {times} times")
    last_index: dict[str, tuple[int, str]] = {}
    for offset, value in final:
        sent = sends.get(value)
        if sent is None:
            result.note("thin_air", f"{value} at offset {offset}")
            continue
        if first_offset[value] != offset:
            continue
        previous = last_index.get(sent.producer)
        if previous is not None and previous[0] > sent.index:
            result.note("reordered", f"{value} at offset {offset} after {previous[1]}")
        else:
            last_index[sent.producer] = (sent.index, value)
    for read in reads:
        if read.value not in sends:
            result.note("thin_air", f"{read.value} read by {read.consumer} at offset {read.offset}")
        if at_offset.get(read.offset) != read.value:
            found = at_offset.get(read.offset)
            result.note("phantom", f"{read.consumer} read {read.value} at offset {read.offset}, "
                                   f"the final log has {'nothing' if found is None else found} there")
    return result
