"""ETL tests: an offline cluster, a registry and events to load; the warehouse read back; `python -m etl` runs.

``EtlEnvironment`` is one broker on a chroot of the session's ZooKeeper plus a standalone registry (a module
fixture shares it, ``environment_fixture``; each test uses topics and a warehouse of its own), and
``spark_fixture`` a SparkSession per module. ``warehouse_rows`` reads a table with pyarrow (the files the
warehouse's snapshot lists), keyed by (topic, partition, offset). ``EtlProcess`` runs ``python -m etl load`` in a
session of its own, so that the Spark JVM and its Python workers go with it when a test kills it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from etl.config import EtlConfig
from etl.store import Warehouse
from pipeline.client.admin import AdminClient
from pipeline.client.producer import Producer, ProducerData
from schemas.events import load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder
from tests.support.cluster import BrokerCluster
from tests.support.polling import wait_until
from tests.support.process import ChildProcess, python_env
from tests.support.http_security import HttpSecurityFiles, http_security_files
from tests.support.registry import RegistryProcess
from tests.support.zookeeper import unique_chroot

EVENT_TIME = 1_700_000_000_000
#: Settings that keep the warehouse's upkeep away from test events of 2023 (retention would expire them).
OLD_EVENTS = {"warehouse.retention": "0", "compaction.enable": "false"}


class EtlEnvironment:
    """The offline cluster (one broker) and a registry, started together, stopped by ``close``. With ``secured``
    the registry wants logins over HTTPS: the runs read it as its writer (the ETL registers the AuditCount
    schema), :meth:`produce` too."""

    def __init__(self, zookeeper_server: Any, directory: Path,
                 broker_overrides: dict[str, object] | None = None, secured: HttpSecurityFiles | None = None) -> None:
        self.directory = directory
        self.secured = secured
        self._stack = ExitStack()
        try:
            self.offline = self._stack.enter_context(BrokerCluster(
                directory / "offline", zookeeper_server.connect_string + unique_chroot("offline"), 1,
                {"num.partitions": 1, "zookeeper.session.timeout.ms": 4000, **(broker_overrides or {})}))
            self.registry = self._stack.enter_context(RegistryProcess(
                directory / "registry.log", data_dir=directory / "registry",
                extra_args=tuple(secured.settings()) if secured else (),
                auth=secured.logins["writer"] if secured else None, ca_file=secured.ca_file if secured else None))
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        self._stack.close()

    @property
    def registry_settings(self) -> dict[str, str]:
        """The registry client settings of a run (its login and the CA), none for an open registry."""
        if self.secured is None:
            return {}
        return {"basic.auth.user.info": ":".join(self.secured.logins["writer"]),
                "schema.registry.ssl.ca.location": str(self.secured.ca_file)}

    def config(self, warehouse: Path, **settings: Any) -> EtlConfig:
        """A run's settings; the test events are from 2023, so retention and compaction are off unless set."""
        return EtlConfig({"zookeeper.connect": self.offline.zk_connect, "warehouse.dir": str(warehouse),
                          "schema.registry.url": self.registry.url, "spark.master": "local[2]",
                          "audit.enable": "false", **OLD_EVENTS, **self.registry_settings,
                          **{k.replace("_", "."): v for k, v in settings.items()}})

    def args(self, warehouse: Path, *extra: str) -> list[str]:
        return ["load", "--zookeeper", self.offline.zk_connect, "--warehouse", str(warehouse), "--master", "local[2]",
                "--registry", self.registry.url, "--set", "audit.enable=false",
                *(item for name, value in OLD_EVENTS.items() for item in ("--set", f"{name}={value}")), *extra]

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        with AdminClient(self.offline.bootstrap) as admin:
            admin.create_topics(topic, partitions=partitions, configs=configs)
        self.offline.wait_for_metadata(topic, partitions)

    def produce(self, topic: str, events: Sequence[dict[str, Any]], schema: dict[str, Any],
                headers: Sequence[list] | None = None, partition_of: Any = None) -> None:
        """Send ``events`` (Avro, written with ``schema``) to ``topic``, keyed by index, acks=all."""
        with SchemaRegistryClient.from_config({"schema.registry.url": self.registry.url,
                                               **self.registry_settings}) as registry:
            encoder = AvroEncoder(registry, {topic: schema})
            with Producer({"zookeeper.connect": self.offline.zk_connect, "request.required.acks": -1,
                           "producer.type": "async", "queue.time": 5, "batch.size": 200,
                           "serializer.class": encoder}) as producer:
                for index, event in enumerate(events):
                    producer.send(ProducerData(topic, b"%d" % index, [event],
                                               headers=[list(headers[index]) if headers else []]))
                producer.flush()


def environment_fixture(name: str, broker_overrides: dict[str, object] | None = None,
                        secured: bool = False) -> Callable[..., Any]:
    """A module fixture: an EtlEnvironment under a temporary directory named ``name``, closed after the module;
    ``secured``: its registry wants logins over HTTPS."""

    @pytest.fixture(scope="module")
    def env(zookeeper_server: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtlEnvironment]:
        directory = tmp_path_factory.mktemp(name)
        environment = EtlEnvironment(zookeeper_server, directory, broker_overrides,
                                     http_security_files(directory / "security") if secured else None)
        try:
            yield environment
        finally:
            environment.close()

    return env


def spark_fixture() -> Callable[..., Any]:
    """A module fixture: the SparkSession of the module's ``env`` settings, stopped (its JVM too) after the module."""

    @pytest.fixture(scope="module")
    def spark(env: EtlEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        from etl.spark import build_session, stop_session

        session = build_session(env.config(tmp_path_factory.mktemp("unused")))
        try:
            yield session
        finally:
            stop_session(session)

    return spark


def page_views(count: int, start: int = 0, version: int | None = None, datacenter: str = "dc1",
               every_ms: int = 60_000) -> list[dict]:
    """PageViewEvents (schema ``version``), one every ``every_ms`` of event time from EVENT_TIME."""
    events = []
    for i in range(start, start + count):
        event = {"header": {"eventId": str(uuid.UUID(int=i + 1, version=4)), "eventTime": EVENT_TIME + i * every_ms,
                            "server": f"fe{i % 3}", "datacenter": datacenter, "service": "frontend", "sequence": i},
                 "memberId": i, "pageKey": f"page-{i % 5}", "url": f"/p/{i}", "referrer": None if i % 2 else "/",
                 "userAgent": "test"}
        if version == 2:
            event["sessionId"] = f"session-{i}"
        events.append(event)
    return events


def warehouse_rows(warehouse: Path, topic: str, group: str = "etl") -> dict[tuple[str, int, int], dict[str, Any]]:
    """Every row of ``topic``'s table (its live files) keyed by (kafka_topic, kafka_partition, kafka_offset);
    AssertionError on a duplicate key."""
    files = Warehouse(warehouse, group).snapshot().table_files().get(topic)
    if not files:
        return {}
    rows: dict[tuple[str, int, int], dict[str, Any]] = {}
    paths = [str(warehouse / f) for f in files]
    partitioning = ds.partitioning(pa.schema([("date", pa.string()), ("hour", pa.int32())]), flavor="hive")
    schema = pa.unify_schemas([pq.read_schema(p) for p in paths] + [partitioning.schema])
    dataset = ds.dataset(paths, schema=schema, format="parquet", partitioning=partitioning,
                         partition_base_dir=str(warehouse / topic))
    for row in dataset.to_table().to_pylist():
        key = (row["kafka_topic"], row["kafka_partition"], row["kafka_offset"])
        assert key not in rows, f"row {key} is in the warehouse twice"
        rows[key] = row
    return rows


#: How the ETL is started: as a module, or through spark-submit (the venv's, found next to this interpreter).
PYTHON_M_ETL = (sys.executable, "-m", "etl")
SPARK_SUBMIT = (str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", "etl/submit.py")


class EtlProcess:
    """One ``python -m etl`` (or spark-submit) child process in its own session (its Spark JVM and workers in
    it too), on the process harness."""

    def __init__(self, log_path: Path, args: Sequence[str], env: dict[str, str] | None = None,
                 command: Sequence[str] = PYTHON_M_ETL) -> None:
        self.log_path = log_path
        self.args = list(args)
        self.env = dict(env or {})
        self.command = list(command)
        self.child = ChildProcess("etl", [*self.command, *self.args], log_path, new_session=True, error=AssertionError)

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.child.process

    def start(self) -> "EtlProcess":
        env = python_env(self.env)
        # spark-submit finds Spark's scripts and the interpreter on the PATH.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        self.child.env = env
        self.child.spawn()
        return self

    def wait(self, timeout: float = 120.0) -> int:
        try:
            return self.child.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"etl still running after {timeout:.0f}s:\n{self.log_tail()}") from None

    def kill_driver(self) -> None:
        """SIGKILL the driver alone, then wait for the rest of its session (the Spark JVM notices and exits)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        wait_until(lambda: not _session_alive(self.process.pid), 30, message="the driver's Spark JVM to exit")

    def cleanup(self) -> None:
        """Kill whatever of the session is left."""
        if self.process is None:
            return
        self.child.kill()
        if _session_alive(self.process.pid):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            wait_until(lambda: not _session_alive(self.process.pid), 30, message="the etl session to end")

    def log_text(self) -> str:
        return self.child.log_text()

    def log_tail(self, lines: int = 40) -> str:
        return self.child.log_tail(lines)


def _session_alive(session_id: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields: state, ppid, pgrp, session, ...; a zombie is gone already.
        if int(fields[3]) == session_id and fields[0] != "Z":
            return True
    return False


def run_etl(log_path: Path, args: Sequence[str], env: dict[str, str] | None = None, timeout: float = 120.0,
            command: Sequence[str] = PYTHON_M_ETL) -> tuple[int, str]:
    """Run ``python -m etl`` (or ``command``) to its end: (exit code, its output)."""
    process = EtlProcess(log_path, args, env, command).start()
    try:
        code = process.wait(timeout)
    finally:
        process.cleanup()
    return code, process.log_text()


def expected_keys(topic: str, ends: dict[int, int], starts: dict[int, int] | None = None) -> set[tuple[str, int, int]]:
    return {(topic, p, o) for p, end in ends.items() for o in range((starts or {}).get(p, 0), end)}


def lineage_headers(cluster: str, partition: int, offset: int) -> list:
    return [("mirror.cluster", cluster.encode()), ("mirror.partition", b"%d" % partition),
            ("mirror.offset", b"%d" % offset)]
