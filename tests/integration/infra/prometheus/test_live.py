"""A live Prometheus (Debian's binary) on the configuration infra.prometheus.config writes, scraping real brokers
of two clusters and a real mirror between them: the targets are up, every broker metric the rules read is
exported, the recording rules evaluate (controllers, messages in, mirror lag and throughput), and TargetDown and
KafkaNoActiveController fire once the dc1 broker is killed; and, scraping the audit service, AuditEventsLost and
AuditWindowIncomplete fire once the audit names events a producer counted that its cluster never got. Everything
is read from Prometheus's HTTP API.

The rules are loaded as held copies (every ``for:`` 2 s) with 1 s scrape and evaluation intervals, so the alert
fires seconds after the kill instead of a minute.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable

from prometheus_client.parser import text_string_to_metric_families

from infra.prometheus.config import Job, Target, write
from schemas.events import EVENT_TOPICS
from tests.support.audit import WINDOW_MS, AuditProcess, publish_phantom_count
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.mirror import BROKER_OVERRIDES, MirrorProcess, create_topic, end_offsets, mirror_args, produce
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.prometheus import PrometheusProcess, exported_names, metric_names_read
from tests.support.registry import standalone_registry
from tests.support.zookeeper import unique_chroot

TOPIC = "events"
PARTITIONS = 2
HOLD = "2s"


def records(first: int, count: int) -> list[tuple[bytes, bytes, int, list]]:
    return [(b"k%d" % i, b"v" * 50, 1_700_000_000_000 + i, []) for i in range(first, first + count)]


def values(prometheus: PrometheusProcess, expression: str) -> list[float]:
    return [float(sample["value"][1]) for sample in prometheus.query(expression)]


def target_health(prometheus: PrometheusProcess, job: str) -> list[str]:
    return [target["health"] for target in prometheus.api("targets", state="active")["activeTargets"]
            if target["labels"]["job"] == job]


def firing(prometheus: PrometheusProcess, name: str) -> list[dict[str, Any]]:
    return [alert for alert in prometheus.alerts(name) if alert["state"] == "firing"]


def test_prometheus_scrapes_brokers_and_a_mirror_evaluates_the_rules_and_fires_when_a_broker_is_killed(
        zookeeper_server: Any, broker_cluster_factory: Callable[..., BrokerCluster], tmp_path: Path) -> None:
    base = zookeeper_server.connect_string
    broker_ports = {"dc1": free_port(), "offline": free_port()}
    dc1, offline = (broker_cluster_factory(base + unique_chroot(name), size=1,
                                           overrides={**BROKER_OVERRIDES, "metrics.port": port})
                    for name, port in broker_ports.items())
    create_topic(dc1, TOPIC, PARTITIONS)
    produce(dc1, TOPIC, records(0, 500))
    port = free_port()
    mirror = MirrorProcess(tmp_path / "mirror.log",
                           mirror_args({"dc1": dc1}, offline, TOPIC, "--metrics-port", str(port))).start()
    instance = f"127.0.0.1:{port}"
    brokers = {name: f"127.0.0.1:{port}" for name, port in broker_ports.items()}
    jobs = [Job("broker", tuple(Target(address, {"cluster": name}) for name, address in brokers.items())),
            Job("mirror", (Target(instance),))]
    config = write(tmp_path / "prometheus", jobs, scrape_interval="1s", evaluation_interval="1s", hold=HOLD)
    try:
        with PrometheusProcess(config, tmp_path / "prometheus") as prometheus:
            wait_until(lambda: mirror.alive() and target_health(prometheus, "mirror") == ["up"]
                       and target_health(prometheus, "broker") == ["up", "up"], 20, interval=0.2,
                       message=lambda: f"the targets up: {prometheus.api('targets')}")
            assert values(prometheus, 'up{job="mirror"}') == [1.0]
            with urllib.request.urlopen(f"http://{brokers['dc1']}/metrics", timeout=10) as answer:
                exported = answer.read().decode()
            assert sorted(metric_names_read("kafka_") - exported_names(text_string_to_metric_families(exported))) == []

            # Recording rules: one active controller per cluster; the mirror's lag summed over the partitions drops
            # to 0 once the first records are mirrored; messages in and mirror throughput show the records produced
            # and mirrored while Prometheus watches.
            for cluster in brokers:
                controllers = f'cluster:kafka_controller_kafkacontroller_active_controller_count:sum{{cluster="{cluster}"}}'
                wait_until(lambda: values(prometheus, controllers) == [1.0], 20, interval=0.2,
                           message=lambda: f"{controllers} = 1, it is {prometheus.query(controllers)}")
            lag = f'source_topic:mirror_lag_records:sum{{source="dc1", topic="{TOPIC}"}}'
            wait_until(lambda: mirror.alive() and values(prometheus, lag) == [0.0], 20, interval=0.2,
                       message=lambda: f"{lag} = 0, it is {prometheus.query(lag)}; {mirror.log_tail(5)}")
            produce(dc1, TOPIC, records(500, 500))
            assert sum(end_offsets(dc1, TOPIC, PARTITIONS).values()) == 1000
            for rate in (f'cluster_topic:kafka_server_brokertopicmetrics_messages_in:rate1m{{cluster="dc1", topic="{TOPIC}"}}',
                         f'source_topic:mirror_records:rate1m{{source="dc1", topic="{TOPIC}"}}'):
                wait_until(lambda: mirror.alive() and [v for v in values(prometheus, rate) if v > 0], 20, interval=0.2,
                           message=lambda: f"{rate} > 0, it is {prometheus.query(rate)}")
            mirrored = f'sum(mirror_records_total{{topic="{TOPIC}"}})'
            wait_until(lambda: values(prometheus, mirrored) == [1000.0], 20, interval=0.2,
                       message=lambda: f"{mirrored} = 1000, it is {prometheus.query(mirrored)}")
            assert prometheus.api("alerts")["alerts"] == []

            dc1.brokers[1].kill()
            (down,) = wait_until(lambda: firing(prometheus, "TargetDown"), 20, interval=0.2,
                                 message=lambda: f"TargetDown firing: {prometheus.api('alerts')}")
            assert down["labels"] == {"alertname": "TargetDown", "job": "broker", "instance": brokers["dc1"],
                                      "cluster": "dc1", "severity": "critical"}
            assert down["annotations"]["summary"] == f"broker target {brokers['dc1']} is down"
            (controller,) = wait_until(lambda: firing(prometheus, "KafkaNoActiveController"), 20, interval=0.2,
                                       message=lambda: f"KafkaNoActiveController firing: {prometheus.api('alerts')}")
            assert controller["labels"] == {"alertname": "KafkaNoActiveController", "cluster": "dc1",
                                            "severity": "critical"}
            assert values(prometheus, 'up{job="broker"}') != [1.0, 1.0]
    finally:
        mirror.kill()


def test_prometheus_fires_the_audit_alerts_when_the_audit_names_lost_events(
        zookeeper_server: Any, broker_cluster_factory: Callable[..., BrokerCluster], tmp_path: Path) -> None:
    base = zookeeper_server.connect_string
    dc1 = broker_cluster_factory(base + unique_chroot("dc1"), size=1, overrides=BROKER_OVERRIDES)
    for topic in EVENT_TOPICS:
        create_topic(dc1, topic, 1)
    registries = standalone_registry(tmp_path / "registry")
    registry = next(registries)
    # The audit reads dc1 alone: with no mirror running, an offline cluster it read would be missing everything.
    audit = AuditProcess(tmp_path, ["--datacenter", f"dc1={dc1.zk_connect}",
                                    "--state-dir", str(tmp_path / "audit"), "--registry", registry.url,
                                    "--window-ms", str(WINDOW_MS), "--grace-ms", "500",
                                    "--set", "reconcile.interval.ms=300", "--set", "checkpoint.interval.ms=300"])
    try:
        audit.wait_ready()
        config = write(tmp_path / "prometheus", [Job("audit", (Target(f"127.0.0.1:{audit.port}"),))],
                       scrape_interval="1s", evaluation_interval="1s", hold=HOLD)
        with PrometheusProcess(config, tmp_path / "prometheus") as prometheus:
            wait_until(lambda: target_health(prometheus, "audit") == ["up"], 20, interval=0.2,
                       message=lambda: f"the audit target up: {prometheus.api('targets')}")
            emulator = subprocess.run(
                [sys.executable, "-m", "producers", "--datacenter", "dc1", "--zookeeper", dc1.zk_connect, "--registry",
                 registry.url, "--servers", "1", "--members", "100", "--rate", "300", "--duration", "2",
                 "--audit-window-ms", str(WINDOW_MS)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
            assert emulator.returncode == 0, emulator.stderr[-2000:]
            windows = wait_until(lambda: [w for w in audit.get("/api/windows")["windows"]
                                          if w["topic"] == "PageViewEvent" and w["counts"].get("datacenter")], 30,
                                 interval=0.3, message="a reconciled PageViewEvent window")
            assert prometheus.api("alerts")["alerts"] == []

            # Three events a producer counted as acknowledged that dc1 never got: lost at the datacenter tier.
            victim = max(windows, key=lambda w: w["windowStart"])
            publish_phantom_count(dc1, registry, "PageViewEvent", victim["windowStart"],
                                  [str(uuid.uuid4()) for _ in range(3)])
            for name in ("AuditEventsLost", "AuditWindowIncomplete"):
                (alert,) = wait_until(lambda: firing(prometheus, name), 30, interval=0.2,
                                      message=lambda: f"{name} firing: {prometheus.api('alerts')}")
                assert alert["labels"] == {"alertname": name, "topic": "PageViewEvent", "tier": "datacenter",
                                           "severity": "critical"}
            assert values(prometheus, 'audit_events_lost_total{topic="PageViewEvent", tier="datacenter"}') == [3.0]
    finally:
        audit.kill()
        next(registries, None)
