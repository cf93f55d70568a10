"""The pure logic of the fault drills: which broker kill-broker picks, how long pause-zookeeper pauses, the
ETL's metrics read (process groups found in /proc: tests/integration/infra/deployment/test_chaos.py), the audit's windows tallied per tier, and the wait for them."""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.deployment import chaos
from infra.deployment.chaos import choose_broker, expiring_pause_s, parse_metrics, runs_by_outcome
from infra.deployment.cli import add_topology_option
from infra.deployment.drill_audit import covering, tally, wait_for_audit
from infra.deployment.topology import load


def _window(start: int, counts: dict[str, int], reconciled: int | None = None, **named: Any) -> dict[str, Any]:
    """A window as the audit's API gives it with its named events (``lost``, ``lostByCount``, ``duplicated``,
    ``unexpected``, ``quarantined``, ``pending``, ``identity``, ``discrepancies``)."""
    window = {"topic": "PageViewEvent", "datacenter": "dc1", "windowStart": start, "windowEnd": start + 1000,
              "reconciledAt": start + 1000 + 500 if reconciled is None else reconciled, "counts": counts,
              "lost": {}, "lostByCount": {}, "duplicated": {}, "unexpected": {}, "quarantined": [], "pending": {},
              "discrepancies": [], "identity": None, **named}
    window["namedEvents"] = (sum(len(ids) for ids in window["lost"].values()) + sum(window["lostByCount"].values())
                             + sum(len(ids) for ids in window["duplicated"].values())
                             + sum(len(ids) for ids in window["unexpected"].values()) + len(window["quarantined"]))
    window["undecoded"] = [d for d in window["discrepancies"] if not d["decoded"]]
    return window


def _identity(created: int, held: int, tier: str = "warehouse", duplicates: int = 0, lost: int = 0,
              quarantined: int = 0, unexpected: int = 0) -> dict[str, Any]:
    return {"tier": tier, "created": created, "held": held, "duplicates": duplicates, "unexpected": unexpected,
            "lost": lost, "quarantined": quarantined,
            "holds": created == held - duplicates - unexpected + lost + quarantined}


def test_kill_broker_picks_the_broker_leading_most_partitions_the_lowest_of_a_tie_else_the_first() -> None:
    assert choose_broker([2, 1, 2, 3, 2], [1, 2, 3]) == 2
    assert choose_broker([3, 1, 3, 1], [1, 2, 3]) == 1
    assert choose_broker([], [2, 3]) == 2
    assert choose_broker([7, 7, 3], [2, 3]) == 3  # a leader of another cluster's ids is not ours


def _topology(tmp_path: Path, tick_ms: int, settings: dict[str, Any] | None = None) -> Any:
    document = {"var_dir": str(tmp_path), "zookeeper": {"tick_ms": tick_ms},
                "datacenters": {"dc1": {"port": 19092, "settings": settings or {}}}, "offline": {"port": 19096, "metrics_port": 19221}}
    path = tmp_path / "topology.yml"
    path.write_text(yaml.safe_dump(document))
    return load(path)


def test_the_default_pause_outlasts_the_session_the_zookeeper_server_grants_the_brokers(tmp_path: Path) -> None:
    # 18 s requested (the broker's default), granted within 2..20 ticks by the server
    assert expiring_pause_s(_topology(tmp_path, 2000)) == 18 + chaos.PAUSE_MARGIN_S
    assert expiring_pause_s(_topology(tmp_path, 500)) == 10 + chaos.PAUSE_MARGIN_S
    # the longest of the clusters' sessions: the offline cluster keeps the default
    assert expiring_pause_s(_topology(tmp_path, 2000, {"zookeeper.session.timeout.ms": 1000})) == \
        18 + chaos.PAUSE_MARGIN_S
    assert expiring_pause_s(_topology(tmp_path, 2000, {"zookeeper.session.timeout.ms": 30000})) == \
        30 + chaos.PAUSE_MARGIN_S


def test_the_etl_metrics_say_whether_a_run_is_in_progress_and_how_runs_ended() -> None:
    text = ('# HELP etl_run_in_progress 1 while a run loads\n# TYPE etl_run_in_progress gauge\n'
            'etl_run_in_progress{group="etl"} 1.0\n'
            '# HELP etl_runs Runs\n# TYPE etl_runs counter\n'
            'etl_runs_total{group="etl",outcome="succeeded"} 2.0\n'
            'etl_runs_total{group="etl",outcome="failed"} 0.0\n'
            'etl_runs_total{group="etl",outcome="nothing-new"} 1.0\n')
    metrics = parse_metrics(text)
    assert metrics["etl_run_in_progress"] == 1.0
    assert runs_by_outcome(metrics) == {"succeeded": 2, "nothing-new": 1}
    none = parse_metrics(text.replace(" 2.0", " 0.0").replace(" 1.0\n", " 0.0\n"))
    assert runs_by_outcome(none) == {}
    assert chaos.run_begun(metrics) and not chaos.run_begun(none)
    assert chaos.run_begun(parse_metrics(text.replace('in_progress{group="etl"} 1.0', 'in_progress{group="etl"} 0')))
    assert chaos.run_begun(parse_metrics('etl_run_in_progress{group="etl"} 1.0\n'))


def test_windows_covering_the_drill_are_those_overlapping_it() -> None:
    windows = [_window(start, {}) for start in (0, 1000, 2000, 3000)]
    assert [w["windowStart"] for w in covering(windows, 1500, 2000)] == [1000, 2000]
    assert [w["windowStart"] for w in covering(windows, 1000, 1000)] == [1000]


def test_the_tally_reads_completeness_against_the_events_created_and_every_name_with_its_tier() -> None:
    windows = [_window(0, {"producer": 5, "datacenter": 4, "mirror": 3, "offline": 4, "warehouse": 3},
                       lost={"producer": {"f": 1}}, duplicated={"offline": {"a": 1}},
                       quarantined=[{"tier": "warehouse", "reason": "null value", "count": 1, "withoutId": 0,
                                     "ids": {"q": 1}},
                                    {"tier": "warehouse", "reason": "not in the Confluent wire format", "count": 0,
                                     "withoutId": 2, "ids": {}}],
                       identity=_identity(5, 3, lost=1, quarantined=1)),
               _window(1000, {"producer": 2, "datacenter": 2, "mirror": 2, "offline": 2, "warehouse": 2},
                       identity=_identity(2, 2))]
    verdict = tally(windows)
    by_tier = {t.tier: t for t in verdict.tiers}
    assert [t.tier for t in verdict.tiers] == ["producer", "datacenter", "mirror", "offline", "warehouse"]
    assert by_tier["producer"].lost == ["f"] and by_tier["offline"].duplicated == ["a"]
    assert by_tier["mirror"].lost == [] and by_tier["mirror"].completeness == 5 / 7  # it under-counted: not lost
    assert by_tier["warehouse"].quarantined == {"null value": 1, "not in the Confluent wire format": 2}
    assert by_tier["warehouse"].completeness == 5 / 7 and verdict.windows == 2 and verdict.unaccounted == []
    assert verdict.lost == "1 event(s) lost at tier producer (first: f)"
    assert by_tier["producer"].describe() == ("producer   completeness 1.000 (7 of 7 created), lost 1 (f), "
                                              "duplicated 0, quarantined 0")
    assert "quarantined 2 (not in the Confluent wire format), 1 (null value)" in by_tier["warehouse"].describe()


def test_an_event_no_producer_created_is_reported_as_unexpected_and_does_not_fail_the_drill() -> None:
    # What `chaos poison-record` leaves: an event of another producer held in dc1, quarantined by the ETL.
    window = _window(1000, {"producer": 4, "datacenter": 5, "mirror": 5, "offline": 5, "warehouse": 4},
                     unexpected={"datacenter": {"u": 1}},
                     quarantined=[{"tier": "warehouse", "reason": "unknown schema id", "count": 1, "withoutId": 0,
                                   "ids": {"u": 1}}],
                     identity=_identity(4, 4, unexpected=1, quarantined=1))
    audit = FakeAudit([[window]])
    verdict = _wait(audit)
    by_tier = {t.tier: t for t in verdict.tiers}
    assert verdict.lost is None and verdict.unaccounted == []
    assert by_tier["datacenter"].unexpected == ["u"] and by_tier["datacenter"].duplicated == []
    assert by_tier["datacenter"].describe() == ("datacenter completeness 1.250 (5 of 4 created), lost 0, "
                                                "duplicated 0, unexpected 1 (u), quarantined 0")
    assert "quarantined 1 (unknown schema id)" in by_tier["warehouse"].describe()
    assert "unexpected" not in by_tier["offline"].describe()
    unaccounted = tally([_window(0, {"producer": 4, "datacenter": 5, "warehouse": 5},
                                 unexpected={"datacenter": {"u": 1}}, identity=_identity(4, 6, unexpected=1))])
    assert unaccounted.unaccounted == ["PageViewEvent dc1 0: created 4 != 6 held at warehouse - 0 duplicates - 1 "
                                       "unexpected + 0 lost + 0 quarantined"]


def test_a_window_unaccounted_for_or_not_named_fails_the_verdict_and_pending_tiers_are_shown() -> None:
    unaccounted = tally([_window(0, {"producer": 3, "datacenter": 3, "warehouse": 1},
                                 identity=_identity(3, 1))])
    assert unaccounted.lost is not None and unaccounted.lost.startswith("1 window(s) unaccounted for (first: "
                                                                        "PageViewEvent dc1 0: created 3 != 1 held")
    by_count = tally([_window(0, {"producer": 900, "datacenter": 500}, lostByCount={"producer": 400},
                              identity=_identity(900, 500, "datacenter", lost=400))])
    assert by_count.lost == "400 event(s) lost at tier producer"
    assert "lost 400 (400 not named: too many for the sketches)" in by_count.tiers[0].describe()
    undecoded = tally([_window(0, {"producer": 9, "datacenter": 3}, discrepancies=[
        {"earlier": "producer", "later": "datacenter", "missing": {}, "duplicated": {}, "decoded": False}])])
    assert undecoded.lost is not None and "more than the audit could name" in undecoded.lost
    pending = tally([_window(0, {"producer": 2, "datacenter": 2, "offline": 1},
                             pending={"offline": {"lagRecords": 1, "waitingFor": "..."}})])
    assert pending.lost is None and pending.pending == 1
    assert "pending in 1 window(s)" in pending.tiers[2].describe()
    assert pending.describe()[-1] == "1 window(s) still pending at some tier (not compared there yet)"


class FakeAudit:
    """The audit's API with a scripted sequence of answers; the clock advances by each sleep."""

    def __init__(self, answers: list[list[dict[str, Any]]]) -> None:
        self.answers = answers
        self.now = 0

    def windows(self, since_ms: int) -> list[dict[str, Any]]:
        answer = self.answers[0] if len(self.answers) == 1 else self.answers.pop(0)
        return [{k: v for k, v in w.items() if k != "discrepancies"} for w in answer if w["windowStart"] >= since_ms]

    def window(self, summary: dict[str, Any]) -> dict[str, Any]:
        return next(w for w in self.answers[0] if w["windowStart"] == summary["windowStart"])

    def sleep(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


def _wait(audit: FakeAudit, deadline_s: float = 60.0, out: io.StringIO | None = None) -> Any:
    return wait_for_audit(audit, 1000, 1200, window_ms=1000, grace_ms=500, deadline_s=deadline_s,  # type: ignore[arg-type]
                          out=out or io.StringIO(), now_ms=lambda: audit.now, sleep=audit.sleep)


def test_the_wait_lasts_until_the_windows_passed_their_grace_and_no_tier_is_pending() -> None:
    behind = [_window(1000, {"producer": 2, "offline": 2, "warehouse": 0},
                      pending={"warehouse": {"lagRecords": None, "waitingFor": "an ETL run"}})]
    caught_up = [_window(1000, {"producer": 2, "offline": 2, "warehouse": 2}, identity=_identity(2, 2))]
    not_yet = [_window(1000, {"producer": 2, "offline": 1}, reconciled=1800)]  # before its grace passed
    audit = FakeAudit([not_yet, behind, behind, caught_up])
    out = io.StringIO()
    verdict = _wait(audit, out=out)
    assert verdict.lost is None and audit.now >= 2500
    assert {t.tier: t.count for t in verdict.tiers} == {"producer": 2, "offline": 2, "warehouse": 2}
    assert "1 window(s) still pending at warehouse: waiting for those tiers to catch up" in out.getvalue()


def test_the_wait_ends_at_its_deadline_with_what_is_still_pending_and_a_loss_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000))
    monkeypatch.setattr(chaos.time, "monotonic", lambda: float(next(clock)))
    stuck = [_window(1000, {"producer": 2, "offline": 1}, pending={"offline": {}})]
    verdict = _wait(FakeAudit([stuck]), deadline_s=30)
    assert verdict.lost is None and verdict.pending == 1
    # A loss named at a ready tier is final: no waiting beyond the windows' grace.
    lost = [_window(1000, {"producer": 2, "offline": 1}, lost={"offline": {"z": 1}},
                    identity=_identity(2, 1, "offline", lost=1))]
    audit = FakeAudit([lost])
    assert _wait(audit).lost == "1 event(s) lost at tier offline (first: z)" and audit.now == 2500


def test_every_drill_parses_with_its_topology_given_before_or_after_it() -> None:
    parser = argparse.ArgumentParser()
    chaos.add_parser(parser.add_subparsers(dest="command"), add_topology_option)
    args = parser.parse_args(["chaos", "--topology", "a.yml", "kill-broker", "dc1", "--broker", "2"])
    assert (args.topology, args.drill, args.cluster, args.broker, args.wait_audit) == ("a.yml", "kill-broker",
                                                                                       "dc1", 2, False)
    args = parser.parse_args(["chaos", "pause-zookeeper", "--seconds", "3", "--topology", "b.yml"])
    assert (args.topology, args.seconds) == ("b.yml", 3.0)
    args = parser.parse_args(["chaos", "kill-etl", "--during-run", "--wait-audit"])
    assert args.during_run and args.wait_audit and args.topology.endswith("topology.yml")
    assert {drill.name for drill in chaos.DRILLS} == {"kill-broker", "kill-mirror", "kill-etl", "pause-zookeeper",
                                                      "kill-registry", "kill-audit", "poison-record", "fill-disk"}


def test_the_new_drills_parse_their_own_arguments() -> None:
    parser = argparse.ArgumentParser()
    chaos.add_parser(parser.add_subparsers(dest="command"), add_topology_option)
    args = parser.parse_args(["chaos", "poison-record", "dc2", "PageViewEvent", "--wait-audit"])
    assert (args.drill, args.cluster, args.topic, args.wait_audit) == ("poison-record", "dc2", "PageViewEvent", True)
    args = parser.parse_args(["chaos", "fill-disk", "offline", "--broker", "3", "--seconds", "5"])
    assert (args.cluster, args.broker, args.seconds, args.headroom_mb) == ("offline", 3, 5.0, 64)
    assert parser.parse_args(["chaos", "kill-registry"]).drill == "kill-registry"
    assert parser.parse_args(["chaos", "kill-audit"]).drill == "kill-audit"


def test_kill_broker_says_a_failover_only_where_the_replication_allows_one(tmp_path: Path) -> None:
    def expectation(replicas: int, in_sync: int) -> str:
        document = {"var_dir": str(tmp_path), "datacenters": {"dc1": {
            "brokers": 3, "replication_factor": replicas, "min_insync_replicas": in_sync}},
                    "offline": {"port": 19096, "metrics_port": 19221}}
        path = tmp_path / "topology.yml"
        path.write_text(yaml.safe_dump(document))
        return chaos.failover_expectation(load(path).datacenters[0])

    default = expectation(3, 2)
    assert default.startswith("Expect a failover") and "no partition goes offline" in default
    assert "no event fails" in default and "1.000 at every tier with nothing named" in default
    assert "NOT_ENOUGH_REPLICAS" in expectation(3, 3) and "failover" not in expectation(3, 3)
    assert "go offline" in expectation(1, 1) and "named lost at the producer tier" in expectation(1, 1)
