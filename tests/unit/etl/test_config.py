"""The ETL's settings carry the client security settings to its driver's cluster and its Spark tasks' context."""

from __future__ import annotations

import pickle

from etl.config import EtlConfig
from etl.task import TaskContext
from pipeline.security.client_settings import security_settings


def test_security_settings_are_parsed_and_travel_with_the_task_context() -> None:
    config = EtlConfig({"zookeeper.connect": "zk:2181/offline", "warehouse.dir": "/w", "security.protocol": "SASL_SSL",
                        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "etl", "sasl.password": "pw",
                        "ssl.ca.location": "/secrets/ca.pem"})
    assert config.security.protocol == "SASL_SSL" and config.security.ca_file == "/secrets/ca.pem"
    assert security_settings(config)["sasl.username"] == "etl"
    context = TaskContext("t", "h:1", "http://r", "{}", 1024, False, security=config.security)
    assert pickle.loads(pickle.dumps(context)).security == config.security
    assert "pw" not in repr(context)


def test_runs_read_committed_unless_told_otherwise_and_the_level_travels_with_the_task_context() -> None:
    base = {"zookeeper.connect": "zk:2181/offline", "warehouse.dir": "/w"}
    assert EtlConfig(base)["isolation.level"] == 1
    assert EtlConfig({**base, "isolation.level": "read_uncommitted"})["isolation.level"] == 0
    assert TaskContext("t", "h:1", "http://r", "{}", 1024, False).isolation_level == 1
    context = TaskContext("t", "h:1", "http://r", "{}", 1024, False, isolation_level=0)
    assert pickle.loads(pickle.dumps(context)).isolation_level == 0
