"""Two registry processes on one ZooKeeper chroot: any instance serves what another registered; a restart
of both loses nothing and allocates no id twice."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pipeline.zk.server import ZooKeeperServer
from tests.support.polling import wait_until
from tests.support.registry import RegistryProcess


def schema(name: str) -> dict:
    return {"schema": json.dumps({"type": "record", "name": name, "fields": [{"name": "f", "type": "int"}]})}


def test_two_instances_agree_on_ids_and_subjects_and_survive_restart(tmp_path: Path, zk_connect: str) -> None:
    first = RegistryProcess(tmp_path / "first.log", zookeeper=zk_connect).start()
    second = RegistryProcess(tmp_path / "second.log", zookeeper=zk_connect).start()
    try:
        a = first.call("POST", "/subjects/a-value/versions", schema("A"))[1]["id"]
        assert second.call("POST", "/subjects/b-value/versions", schema("A")) == (200, {"id": a})
        b = second.call("POST", "/subjects/c-value/versions", schema("B"))[1]["id"]
        assert b != a
        for registry in (first, second):
            assert registry.call("GET", "/subjects") == (200, ["a-value", "b-value", "c-value"])
            assert registry.call("GET", f"/schemas/ids/{b}/schema") == (200, json.loads(schema("B")["schema"]))
            assert registry.call("GET", "/subjects/c-value/versions/latest")[1]["id"] == b
        second.call("PUT", "/config/a-value", {"compatibility": "NONE"})
        assert first.call("GET", "/config/a-value") == (200, {"compatibilityLevel": "NONE"})
        first.call("DELETE", "/subjects/c-value")
        first.call("DELETE", "/subjects/c-value?permanent=true")
        assert second.call("GET", "/subjects/c-value/versions")[1]["error_code"] == 40401
    finally:
        assert first.stop() == 0
        assert second.stop() == 0
    with RegistryProcess(tmp_path / "again.log", zookeeper=zk_connect) as again:
        assert again.call("GET", "/subjects") == (200, ["a-value", "b-value"])
        assert again.call("GET", f"/schemas/ids/{a}")[0] == 200
        assert again.call("GET", "/config/a-value") == (200, {"compatibilityLevel": "NONE"})
        assert again.call("POST", "/subjects/d-value/versions", schema("D"))[1]["id"] > max(a, b)


def test_zookeeper_outage_is_a_bounded_backend_error_and_the_registry_recovers(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zookeeper").start()
    try:
        registry = RegistryProcess(tmp_path / "registry.log", zookeeper=server.connect_string + "/outage",
                                   extra_args=("--zookeeper-timeout", "2")).start()
        try:
            schema_id = registry.call("POST", "/subjects/a-value/versions", schema("A"))[1]["id"]
            assert registry.call("GET", f"/schemas/ids/{schema_id}")[0] == 200
            server.stop()
            started = time.monotonic()
            status, body = registry.call("GET", "/subjects")
            assert time.monotonic() - started < 10
            assert status == 500 and body["error_code"] in (50001, 50002), body
            assert registry.call("GET", f"/schemas/ids/{schema_id}")[0] == 200
            server.start()
            wait_until(lambda: registry.call("GET", "/subjects") == (200, ["a-value"]), 30,
                       message="the registry to serve again after ZooKeeper returned")
        finally:
            assert registry.stop() == 0
    finally:
        server.stop()
