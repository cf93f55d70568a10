"""When a tier has provably counted everything it will count for a window (docs/accounting.md, "Readiness"): until
then it is pending there -- shown with its lag, never compared, so lag is never taken for loss.

A :class:`Follower` is something that reads a cluster's partitions in order: one of the audit's readers (its
positions) or the mirror's consumer group (its committed offsets in the datacenter's ZooKeeper). The service samples
each cluster's end offsets over time (:meth:`Follower.sample`) and tells each follower where it stands
(:meth:`Follower.advance`); a follower *passed* a sample taken at moment ``t`` once it stands at or past those ends
on every partition of a topic: it has then read everything the topic held at ``t``.

:class:`Readiness` applies the contract's rules to one window ending at ``end``, ``m = end + grace``:

- ``producer``: the datacenter's audit-topic reader passed a sample taken at ``m`` or later;
- ``datacenter``: the datacenter's event reader passed a sample of the topic taken at ``m`` or later;
- ``mirror``: the mirror group passed such a sample of the datacenter's topic (observed at moment ``o``) -- it
  publishes its counts before it commits -- and the offline cluster's audit-topic reader passed a sample taken at
  ``o`` or later;
- ``offline``: the offline event reader passed a sample of the topic taken at ``o`` or later (``m`` where the audit
  follows no mirror group: ``mirror.group`` empty, or a datacenter it does not read);
- ``warehouse``: an ETL run that started after the offline tier's moment finished, and the offline audit-topic
  reader passed a sample taken after it finished (its counts are published before the run is recorded).

Each tier's moment (``ready_at``) is kept per window, so readiness only grows. A tier whose source the audit does
not read (no reader, no run history) is ready by the clock alone: its counts are compared from ``m`` on.
"""

from __future__ import annotations

import datetime
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping

from audit.reconcile import WindowKey

__all__ = ["EtlRun", "Follower", "Readiness"]

TopicPartition = tuple[str, int]
#: Samples kept per topic while a follower lags (older ones are thinned out: its readiness can only come later).
MAX_SAMPLES = 256
#: Passings kept per topic (a window older than the oldest is ready as of the oldest: later, never wrong).
MAX_PASSINGS = 1024


@dataclass(frozen=True)
class _Sample:
    at_ms: int
    ends: Mapping[int, int]
    earliest: Mapping[int, int]


@dataclass(frozen=True)
class EtlRun:
    """A finished run of the ETL that loaded, found nothing new, or loaded all but ``failed_topics`` (epoch ms)."""

    started_ms: int
    finished_ms: int
    #: The topics a partial run could not load (loaded again by a later run): it covers none of their windows.
    failed_topics: frozenset[str] = frozenset()


class Follower:
    """A reader of a cluster's partitions and the cluster's end offsets sampled over time: per topic, the moments as
    of which it had read everything, and how far behind the newest sample it is."""

    def __init__(self, name: str, max_samples: int = MAX_SAMPLES, max_passings: int = MAX_PASSINGS) -> None:
        self.name = name
        self._samples: dict[str, deque[_Sample]] = {}
        self._newest: dict[str, _Sample] = {}
        self._passings: dict[str, deque[tuple[int, int]]] = {}
        self._positions: dict[TopicPartition, int] = {}
        self._max_samples = max_samples
        self._max_passings = max_passings

    def sample(self, at_ms: int, topic: str, ends: Mapping[int, int], earliest: Mapping[int, int] | None = None) -> None:
        """The end offsets of ``topic``'s partitions at ``at_ms`` (and the earliest, where the follower has no
        position: a partition emptied by retention holds nothing to read)."""
        sample = _Sample(at_ms, dict(ends), dict(earliest or {}))
        samples = self._samples.setdefault(topic, deque())
        samples.append(sample)
        self._newest[topic] = sample
        if len(samples) > self._max_samples:
            kept = list(samples)
            samples.clear()
            samples.extend([*kept[:-1][::2], kept[-1]])

    def without_position(self, topic: str, partitions: Iterable[int]) -> list[int]:
        """The partitions of ``topic`` the follower stands nowhere on yet."""
        return [p for p in partitions if (topic, p) not in self._positions]

    def advance(self, positions: Mapping[TopicPartition, int], observed_ms: int) -> None:
        """The follower stands at ``positions`` (read at ``observed_ms``): note the samples it has passed."""
        self._positions = dict(positions)
        for topic, samples in self._samples.items():
            passed = None
            while samples and self._passed(topic, samples[0]):
                passed = samples.popleft()
            if passed is not None:
                passings = self._passings.setdefault(topic, deque(maxlen=self._max_passings))
                passings.append((passed.at_ms, observed_ms))

    def _passed(self, topic: str, sample: _Sample) -> bool:
        for partition, end in sample.ends.items():
            position = self._positions.get((topic, partition))
            if position is not None and position >= end:
                continue
            if end <= 0 or sample.earliest.get(partition, -1) >= end:
                continue  # nothing to read there
            return False
        return True

    def first_passing(self, topic: str, since_ms: int) -> tuple[int, int] | None:
        """(sample moment, moment observed) of the first sample taken at ``since_ms`` or later that the follower
        passed (None: none yet)."""
        for passing in self._passings.get(topic, ()):
            if passing[0] >= since_ms:
                return passing
        return None

    def lag(self, topic: str) -> int | None:
        """Records of ``topic`` between where the follower stands and the newest sample (None: not sampled)."""
        sample = self._newest.get(topic)
        if sample is None:
            return None
        behind = 0
        for partition, end in sample.ends.items():
            position = self._positions.get((topic, partition))
            if position is None:
                position = sample.earliest.get(partition, 0)
            behind += max(0, end - position)
        return behind


class Readiness:
    """The contract's readiness rules over the followers of every cluster read (see the module's docstring)."""

    def __init__(self, grace_ms: int, audit_topic: str, *, datacenter_events: Mapping[str, Follower],
                 datacenter_audit: Mapping[str, Follower], mirror: Mapping[str, Follower],
                 offline_events: Follower | None, offline_audit: Follower | None, etl: bool = False) -> None:
        self.grace_ms = grace_ms
        self.audit_topic = audit_topic
        self.datacenter_events = datacenter_events
        self.datacenter_audit = datacenter_audit
        self.mirror = mirror
        self.offline_events = offline_events
        self.offline_audit = offline_audit
        self.etl = etl

    def due_ms(self, key: WindowKey) -> int:
        return key.window_end + self.grace_ms

    def update(self, key: WindowKey, tiers: Iterable[str], ready_at: dict[str, int], now_ms: int,
               runs: list[EtlRun] | None = None) -> bool:
        """Add to ``ready_at`` (tier -> moment) the tiers of ``tiers`` ready for ``key`` now; whether any was."""
        due = self.due_ms(key)
        if now_ms < due:
            return False
        grown = False
        for tier in ("producer", "datacenter", "mirror", "offline", "warehouse"):
            if tier not in tiers or tier in ready_at:
                continue
            moment = getattr(self, f"_{tier}")(key, due, now_ms, ready_at, runs)
            if moment is not None:
                ready_at[tier] = moment
                grown = True
        return grown

    def _audit_reader(self, datacenter: str | None) -> Follower | None:
        if datacenter is not None and datacenter in self.datacenter_audit:
            return self.datacenter_audit[datacenter]
        return self.offline_audit

    def _passed(self, follower: Follower | None, topic: str, since_ms: int, now_ms: int) -> int | None:
        """The moment of the first sample at ``since_ms`` or later ``follower`` passed; by the clock without one."""
        if follower is None:
            return since_ms if now_ms >= since_ms else None
        passing = follower.first_passing(topic, since_ms)
        return None if passing is None else passing[0]

    def _producer(self, key: WindowKey, due: int, now_ms: int, ready_at: dict[str, int], runs: object) -> int | None:
        return self._passed(self._audit_reader(key.datacenter), self.audit_topic, due, now_ms)

    def _datacenter(self, key: WindowKey, due: int, now_ms: int, ready_at: dict[str, int], runs: object) -> int | None:
        return self._passed(self.datacenter_events.get(key.datacenter), key.topic, due, now_ms)

    def mirror_commit(self, key: WindowKey, due: int) -> tuple[int, int] | None | bool:
        """(sample moment, observed moment) of the mirror group's first commit past ``key``'s window in its
        datacenter; None not yet; False when the audit follows no mirror group there (the moment is ``due``)."""
        group = self.mirror.get(key.datacenter)
        if group is None:
            return False
        return group.first_passing(key.topic, due)

    def _mirror(self, key: WindowKey, due: int, now_ms: int, ready_at: dict[str, int], runs: object) -> int | None:
        commit = self.mirror_commit(key, due)
        if commit is None:
            return None
        observed = due if commit is False else commit[1]
        published = self._passed(self.offline_audit, self.audit_topic, observed, now_ms)
        return None if published is None else observed

    def _offline(self, key: WindowKey, due: int, now_ms: int, ready_at: dict[str, int], runs: object) -> int | None:
        commit = self.mirror_commit(key, due)
        if commit is None:
            return None
        return self._passed(self.offline_events, key.topic, due if commit is False else commit[1], now_ms)

    def _warehouse(self, key: WindowKey, due: int, now_ms: int, ready_at: dict[str, int],
                   runs: list[EtlRun] | None) -> int | None:
        held = ready_at.get("offline")
        if held is None:
            if self.offline_events is not None:
                return None
            held = due
        if not self.etl:
            return held
        covering = [run for run in runs or () if run.started_ms >= held and key.topic not in run.failed_topics]
        if not covering:
            return None
        run = min(covering, key=lambda r: r.started_ms)
        # Its counts were published before the run was recorded: read past its end, or given grace to arrive.
        published = run.finished_ms + (0 if self.offline_audit is not None else self.grace_ms)
        return None if self._passed(self.offline_audit, self.audit_topic, published, now_ms) is None \
            else run.started_ms

    def waiting_for(self, key: WindowKey, tier: str, ready_at: Mapping[str, int]) -> dict[str, object]:
        """What ``tier`` waits for in ``key``'s window: ``lagRecords`` (of its reader or group) and in words."""
        due = self.due_ms(key)
        if tier == "producer":
            follower = self._audit_reader(key.datacenter)
            return _lag(follower, self.audit_topic, "the audit's reader of the producers' counts")
        if tier == "datacenter":
            return _lag(self.datacenter_events.get(key.datacenter), key.topic,
                        f"the audit's reader of {key.datacenter}")
        if tier == "mirror":
            commit = self.mirror_commit(key, due)
            if commit is None:
                return _lag(self.mirror.get(key.datacenter), key.topic,
                            f"the mirror's commits in {key.datacenter}")
            return _lag(self.offline_audit, self.audit_topic, "the audit's reader of the mirror's counts")
        if tier == "offline":
            commit = self.mirror_commit(key, due)
            if commit is None:
                return _lag(self.mirror.get(key.datacenter), key.topic, f"the mirror's commits in {key.datacenter}")
            return _lag(self.offline_events, key.topic, "the audit's reader of the offline cluster")
        held = ready_at.get("offline", due if self.offline_events is None else None)
        if held is None:
            return {"lagRecords": None, "waitingFor": "the offline tier"}
        return {"lagRecords": None, "waitingFor": f"an ETL run started after {_clock(held)} to finish"}


def _lag(follower: Follower | None, topic: str, what: str) -> dict[str, object]:
    lag = None if follower is None else follower.lag(topic)
    return {"lagRecords": lag, "waitingFor": what + ("" if lag is None else f" ({lag} records behind)")}


def _clock(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%H:%M:%S UTC")
