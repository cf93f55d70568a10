"""Two registry processes on one ZooKeeper chroot: any instance serves what another registered; a restart
of both loses nothing and allocates no id twice."""

from __future__ import annotations

import json
from pathlib import Path

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
