"""Readiness as docs/accounting.md says: a tier is compared for a window only once it provably counted everything
it will count for it -- the audit's readers past the end offsets sampled at the window's end plus grace, the mirror
group's commit past them and its counts read, the offline reader past the offsets of the moment the mirror
committed, an ETL run that started after that and finished (pure logic over followers fed by hand)."""

from __future__ import annotations

from audit.readiness import EtlRun, Follower, Readiness
from audit.reconcile import WindowKey

GRACE = 2000
KEY = WindowKey("PageViewEvent", "dc1", 10_000, 11_000)
DUE = KEY.window_end + GRACE
AUDIT = "AuditCount"


def test_a_follower_passes_a_sample_once_it_stands_at_its_ends_on_every_partition():
    reader = Follower("dc1-events")
    reader.sample(100, "T", {0: 5, 1: 3})
    reader.sample(200, "T", {0: 9, 1: 3})
    reader.advance({("T", 0): 5}, 150)
    assert reader.first_passing("T", 0) is None and reader.lag("T") == 7
    reader.advance({("T", 0): 6, ("T", 1): 3}, 250)
    assert reader.first_passing("T", 0) == (100, 250) and reader.first_passing("T", 101) is None
    reader.advance({("T", 0): 9, ("T", 1): 3}, 300)
    assert reader.first_passing("T", 101) == (200, 300) and reader.lag("T") == 0


def test_an_empty_partition_or_one_emptied_by_retention_holds_nothing_to_read():
    reader = Follower("offline-events")
    reader.sample(100, "T", {0: 0, 1: 40}, earliest={1: 40})
    assert reader.without_position("T", [0, 1]) == [0, 1]
    reader.advance({}, 120)
    assert reader.first_passing("T", 100) == (100, 120)


def test_a_follower_far_behind_keeps_a_bounded_number_of_samples_and_becomes_ready_later_never_wrongly():
    reader = Follower("dc1-events", max_samples=8)
    for moment in range(100):
        reader.sample(moment, "T", {0: moment})
    assert len(reader._samples["T"]) <= 8
    reader.advance({("T", 0): 50}, 1000)
    passed = reader.first_passing("T", 0)
    assert passed is not None and passed[0] <= 50  # as of an older sample, or one kept instead of it
    assert reader.first_passing("T", passed[0] + 1) is None
    reader.advance({("T", 0): 99}, 2000)
    assert reader.first_passing("T", 51) == (99, 2000)


def followers() -> dict[str, Follower]:
    return {name: Follower(name) for name in ("dc1-events", "dc1-audit", "mirror", "offline-events", "offline-audit")}


def readiness(f: dict[str, Follower], etl: bool = False) -> Readiness:
    return Readiness(GRACE, AUDIT, datacenter_events={"dc1": f["dc1-events"]}, datacenter_audit={"dc1": f["dc1-audit"]},
                     mirror={"dc1": f["mirror"]}, offline_events=f["offline-events"],
                     offline_audit=f["offline-audit"], etl=etl)


def sample_all(f: dict[str, Follower], moment: int, end: int) -> None:
    for name, follower in f.items():
        follower.sample(moment, AUDIT if name.endswith("audit") else "PageViewEvent", {0: end})


def test_the_tiers_become_ready_in_pipeline_order_as_each_proves_it_counted_everything():
    f = followers()
    rules = readiness(f, etl=True)
    ready: dict[str, int] = {}
    tiers = ["producer", "datacenter", "mirror", "offline", "warehouse"]
    assert not rules.update(KEY, tiers, ready, DUE - 1)  # before its grace passed
    sample_all(f, DUE, 10)
    for name in ("dc1-events", "dc1-audit"):
        f[name].advance({(AUDIT if name.endswith("audit") else "PageViewEvent", 0): 10}, DUE + 5)
    assert rules.update(KEY, tiers, ready, DUE + 5) and ready == {"producer": DUE, "datacenter": DUE}
    # The mirror group is far behind: the mirror, offline and warehouse tiers wait, and say for what.
    f["mirror"].advance({("PageViewEvent", 0): 4}, DUE + 6)
    assert not rules.update(KEY, tiers, ready, DUE + 6)
    assert rules.waiting_for(KEY, "mirror", ready) == {"lagRecords": 6, "waitingFor":
                                                        "the mirror's commits in dc1 (6 records behind)"}
    # It commits past the window at DUE + 50; its counts are read once the offline audit reader passes a later
    # sample, and the offline cluster as of that moment.
    f["mirror"].advance({("PageViewEvent", 0): 10}, DUE + 50)
    f["offline-audit"].advance({(AUDIT, 0): 10}, DUE + 51)
    f["offline-events"].advance({("PageViewEvent", 0): 10}, DUE + 51)
    assert not rules.update(KEY, tiers, ready, DUE + 51)  # those samples were taken before the commit
    sample_all(f, DUE + 60, 12)
    f["offline-audit"].advance({(AUDIT, 0): 12}, DUE + 61)
    assert rules.update(KEY, tiers, ready, DUE + 61) and ready["mirror"] == DUE + 50 and "offline" not in ready
    f["offline-events"].advance({("PageViewEvent", 0): 12}, DUE + 62)
    assert rules.update(KEY, tiers, ready, DUE + 62) and ready["offline"] == DUE + 60
    # The warehouse: a run that started before the offline tier's moment does not cover the window.
    runs = [EtlRun(DUE + 30, DUE + 70)]
    assert not rules.update(KEY, tiers, ready, DUE + 80, runs)
    assert rules.waiting_for(KEY, "warehouse", ready)["waitingFor"].startswith("an ETL run started after")
    # A partial run that could not load this window's topic does not cover it either; one that failed another does.
    runs.append(EtlRun(DUE + 85, DUE + 88, frozenset({KEY.topic})))
    runs.append(EtlRun(DUE + 90, DUE + 100, frozenset({"another-topic"})))
    assert not rules.update(KEY, tiers, ready, DUE + 101, runs)  # its counts not read yet
    sample_all(f, DUE + 110, 12)
    f["offline-audit"].advance({(AUDIT, 0): 12}, DUE + 111)
    assert rules.update(KEY, tiers, ready, DUE + 111, runs) and ready["warehouse"] == DUE + 90


def test_without_a_mirror_group_or_readers_the_tiers_are_ready_by_the_clock():
    rules = Readiness(GRACE, AUDIT, datacenter_events={}, datacenter_audit={}, mirror={}, offline_events=None,
                      offline_audit=None)
    ready: dict[str, int] = {}
    assert rules.update(KEY, ["producer", "mirror", "offline", "warehouse"], ready, DUE)
    assert ready == dict.fromkeys(["producer", "mirror", "offline", "warehouse"], DUE)
