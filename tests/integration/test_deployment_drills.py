"""One reduced deployment (dc1 of three brokers with replication 3 and min.insync.replicas 2 as the default topology
has them, an offline cluster of two, low rates, 2 s audit windows) under supervisord, and what it promises beside
the end-to-end test: every topic replicated as the topology says, nothing listening beyond the topology's host,
its var directory owner-only, and the drills: a broker killed fails over, the registry and the audit come back
as they were, a broker's full disk is survived, poison records are stored and mirrored where the drill says."""

from __future__ import annotations

import os
import re
from typing import Iterator

import pytest

from infra.deployment import clusters
from infra.deployment.programs import broker_log_dir
from infra.deployment.poison import NULL_VALUE_KEY, STRAY_LINE, UNKNOWN_SCHEMA_ID
from infra.deployment.small_disk import BALLAST_NAME
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS
from schemas.serde import event_key, schema_id_of
from tests.support.deployment import Deployment, listeners, loose_permissions, process_tree
from tests.support.polling import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    deployment = Deployment(brokers={"dc1": 3, "offline": 2}, datacenters=("dc1",), rate=20)
    try:
        deployment.up()
        yield deployment
    finally:
        deployment.close()


def drill(deployment: Deployment, *arguments: str) -> str:
    """``python -m pipeline chaos ARGUMENTS`` on the deployment, which must end well; its output."""
    result = deployment.command("chaos", *arguments, module="pipeline", timeout=400, check=False)
    assert result.returncode == 0, f"{arguments}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def configs(deployment: Deployment, cluster: str) -> dict[str, tuple[int, dict[str, str]]]:
    """topic -> (replication factor, configs in effect) of every topic of ``cluster``."""
    topology = deployment.topology
    with clusters.admin(topology.cluster_zookeeper(topology.cluster(cluster))) as admin:
        return {d.name: (d.replication_factor, admin.describe_configs(d.name))
                for d in admin.describe_topics(admin.list_topics())}


def test_every_topic_is_replicated_as_its_cluster_says(deployment: Deployment) -> None:
    dc1 = configs(deployment, "dc1")
    assert {(dc1[topic][0], dc1[topic][1]["min.insync.replicas"]) for topic in (*EVENT_TOPICS, AUDIT_TOPIC)} == \
        {(3, "2")}
    assert (dc1[AUDIT_TOPIC][1]["retention.ms"], dc1[AUDIT_TOPIC][1]["retention.bytes"]) == (str(24 * 3_600_000), "-1")
    # the offline cluster: AuditCount made by `up`, the event topics by the mirror from the brokers' defaults,
    # with the offline cluster's own min.insync.replicas rather than dc1's
    def complete() -> dict[str, tuple[int, dict[str, str]]] | None:
        found = configs(deployment, "offline")
        return found if {*EVENT_TOPICS, AUDIT_TOPIC} <= set(found) else None

    offline = wait_until(complete, 60, interval=1, message="the mirror to create every topic in the offline cluster")
    assert {(offline[topic][0], offline[topic][1]["min.insync.replicas"]) for topic in (*EVENT_TOPICS, AUDIT_TOPIC)} \
        == {(2, "1")}
    assert offline[AUDIT_TOPIC][1]["retention.ms"] == str(24 * 3_600_000)


def test_up_sets_an_existing_topic_s_configs_and_names_a_replication_it_does_not_move(deployment: Deployment) -> None:
    zookeeper = deployment.topology.cluster_zookeeper(deployment.topology.cluster("dc1"))
    first = clusters.ensure_topics(zookeeper, {"ensured": {"retention.ms": "60000"}}, 1, 1)
    assert (first.created, first.reconfigured, first.mismatched) == (["ensured"], [], [])
    again = clusters.ensure_topics(zookeeper, {"ensured": {"retention.ms": "120000", "min.insync.replicas": "1"}},
                                   1, 3)
    assert (again.created, again.reconfigured) == ([], ["ensured"])
    assert again.mismatched == [f"ensured has replication factor 1, not 3 as the topology says: python -m pipeline "
                                f"topics alter ensured --replication-factor 3 --zookeeper {zookeeper}"]
    assert configs(deployment, "dc1")["ensured"][1]["retention.ms"] == "120000"
    unchanged = clusters.ensure_topics(zookeeper, {"ensured": {"retention.ms": "120000"}}, 1, 1)
    assert (unchanged.created, unchanged.reconfigured, unchanged.mismatched) == ([], [], [])
    with clusters.admin(zookeeper) as admin:
        admin.delete_topics("ensured")


def test_nothing_listens_beyond_the_topology_s_host(deployment: Deployment) -> None:
    host = deployment.topology.host
    found = listeners(process_tree(deployment.pids()))
    # ZooKeeper, every broker and its metrics, the registry, Prometheus, the emulators, the mirror, the ETL, the audit
    assert {port for port, _ in deployment.topology.ports()} <= {listener.port for listener in found}
    elsewhere = [listener for listener in found if listener.address not in (host, f"::ffff:{host}")]
    assert elsewhere == [], "\n".join(map(str, elsewhere))


def test_everything_the_deployment_writes_is_its_owner_s_only(deployment: Deployment) -> None:
    # the warehouse too: Spark's output, once the ETL's first run has written some
    wait_until(lambda: any(deployment.topology.warehouse.glob("*/date=*/hour=*/*.parquet")), 180, interval=1,
               message=lambda: f"an ETL run to write the warehouse:\n{deployment.log('etl')}")
    assert loose_permissions(deployment.var_dir) == []


def test_a_killed_broker_fails_over_and_comes_back_into_the_isr(deployment: Deployment) -> None:
    before = {info.name: info.pid for info in deployment.supervisor.infos()}
    output = drill(deployment, "kill-broker", "dc1")
    assert "Expect a failover" in output and "no partition goes offline" in output
    killed = re.search(r"SIGKILL (broker-dc1-\d)", output)
    assert killed, output
    # a failover; or, when it was the controller, a restart that registered before a new controller looked
    assert re.search(r"(leadership of the \d+ partitions broker \d led moved to broker\(s\) [\d, ]+|broker \d "
                     r"registered again [\d.]+s after the kill, before the controller moved the leadership of the \d+ "
                     r"partitions it led: it leads them again \(its partitions had no live leader meanwhile\)); no "
                     r"partition was without a leader", output), output
    assert "in the ISR of every partition it holds" in output
    after = {info.name: info.pid for info in deployment.supervisor.infos()}
    assert sorted(name for name in before if after[name] != before[name]) == [killed.group(1)]


def test_the_registry_and_the_audit_come_back_as_they_were(deployment: Deployment) -> None:
    output = drill(deployment, "kill-registry")
    assert re.search(r"the restarted registry serves the same \d+ schema version\(s\) under the same ids", output)
    output = drill(deployment, "kill-audit", "--wait-audit")
    assert re.search(r"the restarted audit reconciled \d+ window\(s\) since it started", output), output
    assert "the audit's verdict over the" in output, output


def test_a_broker_survives_its_disk_filling_up_and_its_log_goes_back_on_the_disk(deployment: Deployment) -> None:
    output = drill(deployment, "fill-disk", "dc1", "--seconds", "8")
    chosen = re.search(r"log directory of broker-dc1-(\d)", output)
    assert chosen, output
    broker = int(chosen.group(1))
    assert re.search(rf"broker {broker} leads its \d+ preferred partitions again", output), output
    assert re.search(r"filled its filesystem: [\d.]+ MiB of ballast, \d+ bytes free", output), output
    refused = re.search(r"after 8s full \(No space left on device\): (\d+) produce append\(s\) refused as leader, "
                        rf"(\d+) follower append\(s\) failed, out of the ISR of \d+ partition\(s\), "
                        rf"broker-dc1-{broker} RUNNING", output)
    assert refused and int(refused.group(1)) + int(refused.group(2)) > 0, output
    log_dir = broker_log_dir(deployment.topology, deployment.topology.cluster("dc1"), broker)
    assert not os.path.ismount(log_dir) and not (log_dir / BALLAST_NAME).exists()
    assert sorted(p.name for p in log_dir.parent.iterdir()) == ["broker-1", "broker-2", "broker-3"]
    assert output.rstrip().count("in the ISR of every partition it holds") >= 3


def test_poison_records_are_stored_where_the_drill_says_and_mirrored(deployment: Deployment) -> None:
    output = drill(deployment, "poison-record", "dc1", "PageViewEvent")
    places = re.findall(r"(a stray line of text|a null value|an event written with schema id \d+[^:]*): "
                        r"PageViewEvent-(\d+) offset (\d+) of dc1(?:, event id ([0-9a-f-]{36}))?", output)
    assert len(places) == 3, output
    assert "the mirror copied them to the offline cluster" in output
    topology = deployment.topology
    stored = {}
    with clusters.admin(topology.cluster_zookeeper(topology.cluster("dc1"))) as admin:
        addresses = admin.cluster.brokers()
        for kind, partition, offset, event_id in places:
            host, port = addresses[admin.cluster.leader("PageViewEvent", int(partition))]
            with SimpleConsumer(host, port) as consumer:
                message = next(m for m in consumer.fetch(FetchRequest("PageViewEvent", int(partition), int(offset),
                                                                      1 << 20)) if m.offset == int(offset))
            stored[kind.split(" ")[1]] = (message.key, message.value, event_id)
    assert stored["stray"][:2] == (None, STRAY_LINE)
    assert stored["null"][:2] == (NULL_VALUE_KEY, None)
    _, value, event_id = stored["event"]
    assert schema_id_of(bytes(value)) == UNKNOWN_SCHEMA_ID
    key = event_key(bytes(value))
    assert key is not None and key.event_id == event_id


def test_a_drill_that_cannot_run_says_why_in_one_line(deployment: Deployment) -> None:
    result = deployment.command("chaos", "poison-record", "offline", "PageViewEvent", module="pipeline", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "python -m pipeline chaos: poison-record writes into a datacenter's cluster, and 'offline' is none of dc1"]
