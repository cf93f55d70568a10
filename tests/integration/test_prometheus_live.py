"""A live Prometheus (Debian's binary) on the configuration infra.prometheus.config writes, scraping a real mirror
between two real clusters: the target is up, the recording rules evaluate on its metrics (lag and throughput),
and TargetDown fires once the mirror is killed. Everything is read from Prometheus's HTTP API.

The rules are loaded as held copies (every ``for:`` 2 s) with 1 s scrape and evaluation intervals, so the alert
fires seconds after the kill instead of a minute.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from infra.prometheus.config import Job, Target, write
from tests.support.cluster import BrokerCluster
from tests.support.mirror import BROKER_OVERRIDES, MirrorProcess, create_topic, end_offsets, mirror_args, produce
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.prometheus import PrometheusProcess
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


def test_prometheus_scrapes_a_mirror_evaluates_the_rules_and_fires_target_down_when_it_is_killed(
        zookeeper_server: Any, broker_cluster_factory: Callable[..., BrokerCluster], tmp_path: Path) -> None:
    base = zookeeper_server.connect_string
    dc1 = broker_cluster_factory(base + unique_chroot("dc1"), size=1, overrides=BROKER_OVERRIDES)
    offline = broker_cluster_factory(base + unique_chroot("offline"), size=1, overrides=BROKER_OVERRIDES)
    create_topic(dc1, TOPIC, PARTITIONS)
    produce(dc1, TOPIC, records(0, 500))
    port = free_port()
    mirror = MirrorProcess(tmp_path / "mirror.log",
                           mirror_args({"dc1": dc1}, offline, TOPIC, "--metrics-port", str(port))).start()
    instance = f"127.0.0.1:{port}"
    config = write(tmp_path / "prometheus", [Job("mirror", (Target(instance),))], scrape_interval="1s",
                   evaluation_interval="1s", hold=HOLD)
    try:
        with PrometheusProcess(config, tmp_path / "prometheus") as prometheus:
            wait_until(lambda: mirror.alive() and target_health(prometheus, "mirror") == ["up"], 20, interval=0.2,
                       message=lambda: f"the mirror target up: {prometheus.api('targets')}")
            assert values(prometheus, 'up{job="mirror"}') == [1.0]

            # Recording rules on the mirror's metrics: its lag summed over the partitions drops to 0 once the
            # first records are mirrored; its throughput shows the records mirrored while Prometheus watches.
            lag = f'source_topic:mirror_lag_records:sum{{source="dc1", topic="{TOPIC}"}}'
            wait_until(lambda: mirror.alive() and values(prometheus, lag) == [0.0], 20, interval=0.2,
                       message=lambda: f"{lag} = 0, it is {prometheus.query(lag)}; {mirror.log_tail(5)}")
            produce(dc1, TOPIC, records(500, 500))
            assert sum(end_offsets(dc1, TOPIC, PARTITIONS).values()) == 1000
            rate = f'source_topic:mirror_records:rate1m{{source="dc1", topic="{TOPIC}"}}'
            wait_until(lambda: mirror.alive() and [v for v in values(prometheus, rate) if v > 0], 20, interval=0.2,
                       message=lambda: f"{rate} > 0, it is {prometheus.query(rate)}")
            mirrored = f'sum(mirror_records_total{{topic="{TOPIC}"}})'
            wait_until(lambda: values(prometheus, mirrored) == [1000.0], 20, interval=0.2,
                       message=lambda: f"{mirrored} = 1000, it is {prometheus.query(mirrored)}")
            assert prometheus.alerts("TargetDown") == []

            mirror.kill()
            (alert,) = wait_until(lambda: firing(prometheus, "TargetDown"), 20, interval=0.2,
                                  message=lambda: f"TargetDown firing: {prometheus.api('alerts')}")
            assert alert["labels"] == {"alertname": "TargetDown", "job": "mirror", "instance": instance,
                                       "severity": "critical"}
            assert alert["annotations"]["summary"] == f"mirror target {instance} is down"
            assert values(prometheus, 'up{job="mirror"}') == [0.0]
    finally:
        mirror.kill()
