"""The offset plan of `consumer-groups --reset-offsets`, computed as kafka-consumer-groups.sh computes it.

Which partitions: ``--topic T`` (every partition), ``--topic T:0,2`` (those), or ``--all-topics`` (every
partition the group has a committed offset for). Where to: ``--to-earliest``, ``--to-latest``,
``--to-datetime`` (the first offset at or after the time, the log end when no message is that recent),
``--shift-by N`` (the committed offset plus N) or ``--to-offset N``; shifted and explicit offsets are
clamped into [log start, log end], as Kafka does.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

from pipeline.cli.common import CliError

TopicPartition = tuple[str, int]

EARLIEST = "earliest"
LATEST = "latest"
DATETIME = "datetime"
SHIFT = "shift-by"
OFFSET = "offset"


@dataclass(frozen=True)
class TopicSelection:
    """One --topic: a topic and its chosen partitions (None: all of them)."""

    topic: str
    partitions: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ResetTarget:
    """Where the offsets go: one of the constants above, with its number (ms, shift or offset) if any."""

    kind: str
    value: int = 0


def topic_selection(text: str) -> TopicSelection:
    """argparse type for --topic: ``TOPIC`` or ``TOPIC:P,P,...``."""
    topic, sep, partitions = text.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P,P..., got {text!r}")
    if not sep:
        return TopicSelection(topic)
    try:
        chosen = tuple(sorted({int(p) for p in partitions.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOPIC:P,P... with partition numbers, got {text!r}") from None
    if not chosen or chosen[0] < 0:
        raise argparse.ArgumentTypeError(f"partitions must be numbers >= 0, got {text!r}")
    return TopicSelection(topic, chosen)


def datetime_ms(text: str) -> int:
    """argparse type for --to-datetime: ``YYYY-MM-DDTHH:mm:SS.sss`` (local time, or with Z / +hh:mm) in ms."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DDTHH:mm:SS.sss, got {text!r}") from None
    return int(moment.timestamp() * 1000)


def target_of(args: argparse.Namespace) -> ResetTarget:
    """The one reset target the arguments name; CliError (usage) when there is none."""
    if args.to_earliest:
        return ResetTarget(EARLIEST)
    if args.to_latest:
        return ResetTarget(LATEST)
    for kind, value in ((DATETIME, args.to_datetime), (SHIFT, args.shift_by), (OFFSET, args.to_offset)):
        if value is not None:
            return ResetTarget(kind, value)
    raise CliError("--reset-offsets needs one of --to-earliest, --to-latest, --to-datetime, --shift-by, --to-offset",
                   exit_code=2)


def plan_reset(target: ResetTarget, partitions: list[TopicPartition], committed: Mapping[TopicPartition, int],
               earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               at_time: Mapping[TopicPartition, int | None] | None = None) -> dict[TopicPartition, int]:
    """The new committed offset of each partition. ``at_time`` holds the offsets for --to-datetime's time
    (None where no message is that recent); a shift needs a committed offset to start from."""
    plan = {}
    for tp in sorted(partitions):
        low, high = earliest[tp], latest[tp]
        if target.kind == EARLIEST:
            new = low
        elif target.kind == LATEST:
            new = high
        elif target.kind == DATETIME:
            found = (at_time or {}).get(tp)
            new = high if found is None else found
        elif target.kind == SHIFT:
            if tp not in committed:
                raise CliError(f"cannot shift the offset of {tp[0]}-{tp[1]}: the group has no committed offset there")
            new = committed[tp] + target.value
        else:
            new = target.value
        plan[tp] = min(max(new, low), high)
    return plan
