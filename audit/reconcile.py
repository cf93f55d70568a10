"""Reconciling the tiers of one topic, datacenter and window of event time (pure logic, no I/O), as
docs/accounting.md says.

Tiers, in pipeline order (``TIERS``): ``producer`` (the events the emulators created: acknowledged by the
datacenter cluster, or failed for good), ``datacenter`` (what that cluster holds, counted by the audit service),
``mirror`` (acknowledged by the offline cluster), ``offline`` (what the offline cluster holds) and ``warehouse``
(rows the ETL loaded). Each tier brings a count, bytes and the sketch of its event ids (summed over the hosts that
counted), and a tier may have set records aside (quarantine, per reason). Completeness of a tier = its count / the
events created.

Only the tiers that are *ready* for the window (they provably counted everything they will count for it, which the
caller decides) are compared; the others are pending. The comparison walks the tiers that hold the events
(``DATA_TIERS``) from the producer on -- producer -> datacenter -> offline -> warehouse -- and the mirror beside the
datacenter: each step's difference of sketches (the later tier's, plus what was quarantined on the way, minus the
earlier's) is decoded into the ids missing at the later tier and those it holds more often (:class:`Discrepancy`).
A step too large for the sketches is left undecoded, for the caller to read back from the clusters where both
tiers are clusters (:func:`account` then names again).

Naming (:func:`account`): copies of each id are summed along the steps, relative to the events created. An id
missing at the last ready tier that holds data is **lost**, at the first tier where it went missing (``producer``
when the producer's failed sketch names it: no cluster ever had it); so a mirror that under-counted does not make
the tiers after it look lost. An id with more copies at a data tier than at the one before is **duplicated**
there -- unless the caller read the first data tier's cluster back and found it held exactly as many times as the
extra copies named (:func:`split_unexpected`): no producer tier counted it, so it is **unexpected** there (held,
created by no producer the audit hears from). Quarantined ids are named with their tier and reason. The identity
``created = held at the last data tier - extra copies there (duplicated or unexpected) + lost + quarantined`` is
checked once every tier is ready and decoded; a window where it does not hold is unaccounted for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping

from audit.measures import FAILED, QUARANTINED, QUARANTINED_WITHOUT_ID, parse_measure
from pipeline.auditing.sketch import EventSketch, SketchError

__all__ = ["COMPLETE", "DATA_TIERS", "Discrepancy", "INCOMPLETE", "Identity", "PENDING", "Quarantine", "TIERS",
           "TierCount", "WindowKey", "WindowResult", "account", "reconcile", "split_unexpected"]

TIERS = ("producer", "datacenter", "mirror", "offline", "warehouse")
#: The tiers that hold the events (the others count what clients were acknowledged).
DATA_TIERS = ("datacenter", "offline", "warehouse")
PRODUCER = TIERS[0]
#: Window states.
PENDING, COMPLETE, INCOMPLETE = "pending", "complete", "incomplete"


@dataclass(frozen=True, order=True)
class WindowKey:
    """One reconciled unit: a topic's events of one datacenter in one window of event time."""

    topic: str
    datacenter: str
    window_start: int
    window_end: int


@dataclass
class TierCount:
    """What one tier counted in a window, summed over its hosts (``sketch`` None: no ids reported)."""

    count: int = 0
    bytes: int = 0
    sketch: EventSketch | None = None
    hosts: int = 0

    def add(self, count: int, size: int, sketch: EventSketch | None) -> None:
        self.count += count
        self.bytes += size
        self.hosts += 1
        if sketch is not None:
            self.sketch = sketch if self.sketch is None else self.sketch + sketch


@dataclass
class Discrepancy:
    """One step between two tiers that both counted: the events missing at the ``later`` tier and those it holds
    more often than the ``earlier`` one, each with the number of copies; ``decoded`` False when the sketches differ
    by more than they can name (then the lists may be partial). ``unnamed``: events known to be missing at the later
    tier that no sketch could name (the producer's failures, when too many for its failed sketch). ``unexpected``:
    ids the later tier holds that the earlier never had, with their copies (:func:`split_unexpected`: the sketches
    cannot tell them from duplicates, reading the later tier's cluster back can)."""

    earlier: str
    later: str
    missing: dict[str, int] = field(default_factory=dict)
    duplicated: dict[str, int] = field(default_factory=dict)
    decoded: bool = True
    #: True when the events were named by reading the window back from the clusters (too many for the sketch).
    read: bool = False
    unnamed: int = 0
    unexpected: dict[str, int] = field(default_factory=dict)


@dataclass
class Quarantine:
    """Records a tier set aside in a window for one reason: ``count`` with an event id (``ids``, None when more than
    their sketch can name), ``without_id`` counted only."""

    tier: str
    reason: str
    count: int = 0
    without_id: int = 0
    ids: dict[str, int] | None = None


@dataclass
class Identity:
    """The accounting identity at ``tier`` (the last tier that holds data): created = held - extra copies + lost +
    quarantined (with ids), the extra copies being ``duplicates`` (of events created) and ``unexpected`` (of events
    no producer tier counted)."""

    tier: str
    created: int
    held: int
    duplicates: int
    lost: int
    quarantined: int
    unexpected: int = 0

    @property
    def holds(self) -> bool:
        return self.created == self.held - self.duplicates - self.unexpected + self.lost + self.quarantined


@dataclass
class WindowResult:
    """The reconciliation of one window: counts and completeness per tier, the steps compared, what is named, the
    identity and the window's state (``PENDING``, ``COMPLETE`` or ``INCOMPLETE``)."""

    key: WindowKey
    counts: dict[str, int]
    completeness: dict[str, float | None]
    discrepancies: list[Discrepancy]
    state: str = COMPLETE
    #: The tiers compared (ready) and those pending, the latter with what they wait for (filled by the caller).
    ready: list[str] = field(default_factory=list)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The producer tier's acknowledged events (its count is the events created).
    acknowledged: int | None = None
    lost: dict[str, dict[str, int]] = field(default_factory=dict)
    lost_by_count: dict[str, int] = field(default_factory=dict)
    duplicated: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Events held at a tier that no producer tier counted (tier -> id -> copies).
    unexpected: dict[str, dict[str, int]] = field(default_factory=dict)
    quarantined: list[Quarantine] = field(default_factory=list)
    identity: Identity | None = None
    #: The producer's failed ids when its failed sketch names them (for naming losses at the producer tier).
    failed_ids: dict[str, int] | None = field(default=None, repr=False, compare=False)
    threshold: float = field(default=1.0, repr=False, compare=False)

    @property
    def undecoded(self) -> list[Discrepancy]:
        return [d for d in self.discrepancies if not d.decoded]

    @property
    def unaccounted(self) -> bool:
        """Every tier ready and decoded, and the identity does not hold."""
        return self.identity is not None and not self.identity.holds

    def complete(self, threshold: float | None = None) -> bool:
        """Whether the window is complete (every tier ready, reached ``threshold`` and nothing is named)."""
        if threshold is None or threshold == self.threshold:
            return self.state == COMPLETE
        return _state(self, threshold) == COMPLETE

    def lost_at(self, tier: str) -> int:
        """Events named lost at ``tier``, by id or by count."""
        return sum(self.lost.get(tier, {}).values()) + self.lost_by_count.get(tier, 0)

    def quarantined_at(self, tier: str) -> int:
        return sum(q.count + q.without_id for q in self.quarantined if q.tier == tier)

    def tier_states(self, threshold: float | None = None) -> dict[str, str]:
        """Per tier counted: ``pending``, ``lost`` (named lost there, or its step undecoded, or the identity fails
        there), ``quarantined``, ``duplicated``, ``unexpected`` (it holds events no producer tier counted), ``short``
        (below the threshold: events lost or set aside before it, or it under-counted) or ``complete``."""
        threshold = self.threshold if threshold is None else threshold
        undecoded = {d.later for d in self.undecoded}
        states = {}
        for tier in self.counts:
            ratio = self.completeness.get(tier)
            if tier in self.pending:
                states[tier] = "pending"
            elif self.lost_at(tier) or tier in undecoded or (self.unaccounted and self.identity.tier == tier):
                states[tier] = "lost"
            elif self.quarantined_at(tier):
                states[tier] = "quarantined"
            elif self.duplicated.get(tier):
                states[tier] = "duplicated"
            elif self.unexpected.get(tier):
                states[tier] = "unexpected"
            elif ratio is not None and ratio < threshold:
                states[tier] = "short"
            else:
                states[tier] = "complete"
        return states


def _ids(counted: TierCount) -> tuple[bool, EventSketch | None]:
    """(whether the ids of ``counted`` are known, their sketch -- None for none)."""
    if counted.sketch is not None:
        return True, counted.sketch
    return counted.count == 0, None


def _sum(parts: Iterable[TierCount]) -> tuple[int, bool, EventSketch | None]:
    """Count of ``parts`` together, whether all their ids are known, and their sketch (None: no ids)."""
    total, known, sketch = 0, True, None
    for part in parts:
        total += part.count
        has_ids, ids = _ids(part)
        known = known and has_ids
        if ids is not None:
            sketch = ids if sketch is None else sketch + ids
    return total, known, sketch


def _difference(after: EventSketch | None, before: EventSketch | None) -> EventSketch | None:
    if before is None:
        return after
    if after is None:
        return EventSketch(before.cells_per_table) - before
    return after - before


def _decode(sketch: EventSketch | None) -> dict[str, int] | None:
    """Id -> copies of ``sketch`` (None: empty); None when it holds more than it can name."""
    if sketch is None or sketch.is_empty():
        return {}
    decoded = sketch.decode()
    return decoded.counts if decoded.complete else None


def _split(counts: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(missing, duplicated) of a difference id -> copies."""
    return ({i: -c for i, c in sorted(counts.items()) if c < 0}, {i: c for i, c in sorted(counts.items()) if c > 0})


class _Window:
    """The measures of one window, sorted into tiers, the producer's failures and the quarantines."""

    def __init__(self, counts: Mapping[str, TierCount], expected: Iterable[str]) -> None:
        self.tiers: dict[str, TierCount] = {}
        self.failed = TierCount()
        self.quarantines: dict[tuple[str, str], tuple[TierCount, int]] = {}
        for measure, counted in counts.items():
            tier, kind, reason = parse_measure(measure)
            if tier not in TIERS:
                continue
            if not kind:
                self.tiers[tier] = counted
            elif kind == FAILED and tier == PRODUCER:
                self.failed = counted
            elif kind in (QUARANTINED, QUARANTINED_WITHOUT_ID):
                with_ids, without = self.quarantines.get((tier, reason), (TierCount(), 0))
                if kind == QUARANTINED:
                    with_ids = counted
                else:
                    without = counted.count
                self.quarantines[(tier, reason)] = (with_ids, without)
        for tier in expected:
            self.tiers.setdefault(tier, TierCount())
        if self.failed.hosts or self.failed.count:
            self.tiers.setdefault(PRODUCER, TierCount())
        for tier, _ in self.quarantines:
            self.tiers.setdefault(tier, TierCount())

    def held_after(self, earlier: str, later: str) -> list[TierCount]:
        """``later``'s count and what the tiers after ``earlier`` up to ``later`` set aside with ids."""
        low, high = TIERS.index(earlier), TIERS.index(later)
        return [self.tiers[later], *(with_ids for (tier, _), (with_ids, _) in sorted(self.quarantines.items())
                                     if low < TIERS.index(tier) <= high)]

    def step(self, earlier: str, later: str) -> Discrepancy | None:
        """The difference from ``earlier`` to ``later`` (None: none)."""
        before = [self.tiers[earlier]] + ([self.failed] if earlier == PRODUCER else [])
        count_before, known_before, sketch_before = _sum(before)
        count_after, known_after, sketch_after = _sum(self.held_after(earlier, later))
        if not (known_before and known_after):
            if earlier == PRODUCER and known_after and _ids(self.tiers[PRODUCER])[0]:
                return self._producer_step(later, sketch_after)  # today's records: failures without their ids
            return None if count_before == count_after else Discrepancy(earlier, later, decoded=False)
        try:
            difference = _difference(sketch_after, sketch_before)
        except SketchError:
            return Discrepancy(earlier, later, decoded=False)
        decoded = _decode(difference)
        if decoded is not None:
            return Discrepancy(earlier, later, *_split(decoded)) if decoded else None
        if earlier == PRODUCER:
            return self._producer_step(later, sketch_after)
        assert difference is not None
        return Discrepancy(earlier, later, *_split(difference.decode().counts), decoded=False)

    def _versus_acknowledged(self, sketch_after: EventSketch | None) -> dict[str, int] | None:
        """The difference from the producers' acknowledged events alone (None: too large)."""
        known, acknowledged = _ids(self.tiers[PRODUCER])
        if not known:
            return None
        try:
            return _decode(_difference(sketch_after, acknowledged))
        except SketchError:
            return None

    def _producer_step(self, later: str, sketch_after: EventSketch | None) -> Discrepancy:
        """The step from the producer tier when the whole difference is too large: the acknowledged events and the
        failed ones apart. With both named, the step is named; when only the acknowledged part is named and no
        event the producers did not acknowledge reached ``later``, every failed event is missing there (counted,
        ``unnamed``)."""
        versus_acknowledged = self._versus_acknowledged(sketch_after)
        known, failed_sketch = _ids(self.failed)
        failed = _decode(failed_sketch) if known else None
        if versus_acknowledged is not None and failed is not None:
            combined = dict(versus_acknowledged)
            for event, copies in failed.items():
                combined[event] = combined.get(event, 0) - copies
            return Discrepancy(PRODUCER, later, *_split({i: c for i, c in combined.items() if c}))
        if versus_acknowledged is not None and not any(c > 0 for c in versus_acknowledged.values()):
            missing, _ = _split(versus_acknowledged)
            return Discrepancy(PRODUCER, later, missing, {}, unnamed=self.failed.count)
        return Discrepancy(PRODUCER, later, decoded=False)

    def failed_ids(self, step: Discrepancy | None, sketch_after: EventSketch | None) -> dict[str, int] | None:
        """The producer's failed ids: from its failed sketch, or else those the step names missing that the
        acknowledged events do not (None: not known)."""
        known, failed_sketch = _ids(self.failed)
        failed = _decode(failed_sketch) if known else None
        if failed is not None or step is None or not step.decoded:
            return failed
        versus_acknowledged = self._versus_acknowledged(sketch_after)
        if versus_acknowledged is None:
            return None
        return {i: n for i, n in step.missing.items() if versus_acknowledged.get(i, 0) >= 0}


def reconcile(key: WindowKey, counts: Mapping[str, TierCount], order: Iterable[str] = TIERS,
              expected: Iterable[str] = (), ready: Collection[str] | None = None,
              threshold: float = 1.0) -> WindowResult:
    """Compare the tiers of ``ready`` (None: every tier counted) that counted ``key``'s window, ``counts`` by measure
    (:mod:`audit.measures`); a tier of ``expected`` that counted nothing in this window counts as zero events. The
    tiers counted but not ready are pending."""
    window = _Window(counts, expected)
    present = [t for t in order if t in window.tiers]
    compared = [t for t in present if ready is None or t in ready]
    created = window.tiers[PRODUCER].count + window.failed.count if PRODUCER in window.tiers else None
    tier_counts = {t: (created if t == PRODUCER else window.tiers[t].count) for t in present}
    completeness: dict[str, float | None] = {t: None if not created else tier_counts[t] / created for t in present}
    chain = [t for t in (PRODUCER, *DATA_TIERS) if t in compared]
    steps = [window.step(earlier, later) for earlier, later in zip(chain, chain[1:])]
    base = _mirror_base(chain)
    if "mirror" in compared and base is not None:
        steps.append(window.step(base, "mirror"))
    failed_ids = None
    if PRODUCER in compared:
        first = steps[0] if len(chain) > 1 else None
        after = _sum(window.held_after(PRODUCER, chain[1]))[2] if len(chain) > 1 else None
        failed_ids = window.failed_ids(first, after)
    result = WindowResult(key, tier_counts, completeness, [s for s in steps if s is not None],
                          ready=compared, pending={t: {} for t in present if t not in compared},
                          acknowledged=window.tiers[PRODUCER].count if PRODUCER in window.tiers else None,
                          failed_ids=failed_ids, threshold=threshold)
    for (tier, reason), (with_ids, without) in sorted(window.quarantines.items()):
        if tier in compared and (with_ids.count or without):  # (a replay's negative record nets a quarantine out)
            known, ids = _ids(with_ids)
            result.quarantined.append(Quarantine(tier, reason, with_ids.count, without,
                                                 _decode(ids) if known else None))
    return account(result)


def _mirror_base(chain: list[str]) -> str | None:
    """The tier the mirror is compared with: the last tier of ``chain`` before it."""
    before = [t for t in chain if TIERS.index(t) < TIERS.index("mirror")]
    return before[-1] if before else None


def split_unexpected(step: Discrepancy, held: Mapping[str, int]) -> dict[str, int]:
    """Move the ids ``step`` names duplicated that its later tier holds exactly as many times as their extra copies
    (``held``: id -> copies there, read back from its cluster) to ``step.unexpected``: the earlier tier never had
    them. An id held more often is duplicated (the earlier tier had it); one held less often, or not read, stays
    duplicated (the read did not see every copy: nothing can be told). The ids moved."""
    moved = {event: n for event, n in step.duplicated.items() if held.get(event) == n}
    if moved:
        step.duplicated = {event: n for event, n in step.duplicated.items() if event not in moved}
        step.unexpected = {**step.unexpected, **moved}
    return moved


def _plus(copies: Mapping[str, int], step: Discrepancy | None) -> dict[str, int]:
    """``copies`` after ``step`` (+ duplicated + unexpected - missing)."""
    after = dict(copies)
    if step is not None:
        for extra in (step.duplicated, step.unexpected):
            for event, n in extra.items():
                after[event] = after.get(event, 0) + n
        for event, n in step.missing.items():
            after[event] = after.get(event, 0) - n
    return {event: n for event, n in after.items() if n}


def account(result: WindowResult) -> WindowResult:
    """Name what ``result``'s steps say (lost, duplicated, unexpected), check the identity and set the state; called
    again after the caller decoded a step or told unexpected events from duplicates by reading the clusters."""
    ready = set(result.ready)
    chain = [t for t in (PRODUCER, *DATA_TIERS) if t in ready]
    into = {d.later: d for d in result.discrepancies}
    # Copies of each id at each tier, relative to the first tier of the chain (the events created).
    copies: dict[str, dict[str, int]] = {}
    last = None
    blocked = False
    if chain:
        copies[chain[0]] = {}
        last = chain[0]
        for earlier, later in zip(chain, chain[1:]):
            step = into.get(later)
            if step is not None and not step.decoded:
                blocked = True
                break
            copies[later] = _plus(copies[earlier], step)
            last = later
    base = _mirror_base(chain)
    mirror = into.get("mirror")
    if "mirror" in ready and base in copies and (mirror is None or mirror.decoded):
        copies["mirror"] = _plus(copies[base], mirror)
    result.lost, result.lost_by_count, result.duplicated, result.unexpected = {}, {}, {}, {}
    if last in DATA_TIERS:
        _name(result, chain, copies, last)
    result.identity = None
    if not result.pending and not blocked and last in DATA_TIERS and chain[0] == PRODUCER:
        extras = sum(n for n in copies[last].values() if n > 0)
        # The extra copies still held at the last tier of the events unexpected before it.
        foreign = sum(min(max(copies[last].get(event, 0), 0), n)
                      for named in result.unexpected.values() for event, n in named.items())
        result.identity = Identity(
            last, result.counts[PRODUCER], result.counts[last], extras - foreign,
            sum(result.lost_at(t) for t in TIERS),
            sum(q.count for q in result.quarantined if TIERS.index(q.tier) <= TIERS.index(last)), foreign)
    result.state = _state(result, result.threshold)
    return result


def _name(result: WindowResult, chain: list[str], copies: dict[str, dict[str, int]], last: str) -> None:
    """Lost: each id missing at ``last`` at the first tier it went missing; duplicated: the extra copies each data
    tier up to ``last`` holds over the one before it; unexpected: the ids a data tier holds that the one before it
    never had (as read back from the clusters)."""
    into = {d.later: d for d in result.discrepancies}
    considered = [t for t in TIERS if t in copies and t != PRODUCER and TIERS.index(t) <= TIERS.index(last)]
    first_data = chain[1] if len(chain) > 1 and chain[0] == PRODUCER else None
    failed = result.failed_ids or {}
    for event, n in sorted(copies[last].items()):
        if n >= 0:
            continue
        if event in failed and first_data is not None and copies[first_data].get(event, 0) < 0:
            tier = PRODUCER
        else:
            tier = next((t for t in considered if copies[t].get(event, 0) < 0), last)
        result.lost.setdefault(tier, {})[event] = -n
    if first_data is not None:
        step = into.get(first_data)
        if step is not None and step.unnamed:
            result.lost_by_count[PRODUCER] = step.unnamed
    for tier in chain[1:]:
        if tier not in copies or TIERS.index(tier) > TIERS.index(last):
            break
        step = into.get(tier)
        if step is not None and step.duplicated:
            result.duplicated[tier] = dict(step.duplicated)
        if step is not None and step.unexpected:
            result.unexpected[tier] = dict(step.unexpected)


def _state(result: WindowResult, threshold: float) -> str:
    if result.pending:
        return PENDING
    named = (result.undecoded or result.lost or result.lost_by_count or result.duplicated or result.unexpected
             or result.quarantined or result.unaccounted)
    short = any(c is not None and c < threshold for c in result.completeness.values())
    return INCOMPLETE if named or short else COMPLETE
