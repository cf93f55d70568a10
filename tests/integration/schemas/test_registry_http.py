"""The registry's REST API over HTTP against a running `python -m schemas.registry` process (standalone)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.polling import wait_until
from tests.support.registry import CONTENT_TYPE, REPO_ROOT, RegistryProcess


def user(*extra: dict) -> dict:
    return {"schema": json.dumps({"type": "record", "name": "User",
                                  "fields": [{"name": "id", "type": "long"}, *extra]})}


V1 = user()
V2 = user({"name": "email", "type": ["null", "string"], "default": None})
NO_DEFAULT = user({"name": "age", "type": "int"})


def test_register_lookup_and_read_back(registry: RegistryProcess) -> None:
    call = registry.call
    status, first = call("POST", "/subjects/a-value/versions", V1)
    assert status == 200 and set(first) == {"id"}
    assert call("POST", "/subjects/a-value/versions", V1) == (200, first)
    assert call("POST", "/subjects/b-value/versions", V1) == (200, first)
    status, second = call("POST", "/subjects/a-value/versions", V2)
    assert status == 200 and second["id"] > first["id"]
    status, found = call("POST", "/subjects/a-value", V1)
    assert status == 200 and (found["version"], found["id"]) == (1, first["id"])
    assert json.loads(found["schema"]) == json.loads(V1["schema"])
    status, by_id = call("GET", f"/schemas/ids/{first['id']}")
    assert status == 200 and json.loads(by_id["schema"]) == json.loads(V1["schema"])
    assert call("GET", f"/schemas/ids/{first['id']}/schema") == (200, json.loads(V1["schema"]))
    assert call("GET", f"/schemas/ids/{first['id']}/subjects") == (200, ["a-value", "b-value"])
    assert call("GET", f"/schemas/ids/{first['id']}/versions") == (
        200, [{"subject": "a-value", "version": 1}, {"subject": "b-value", "version": 1}])
    assert call("GET", "/schemas/types") == (200, ["AVRO"])
    assert call("GET", "/subjects") == (200, ["a-value", "b-value"])
    assert call("GET", "/subjects/a-value/versions") == (200, [1, 2])
    status, latest = call("GET", "/subjects/a-value/versions/latest")
    assert status == 200 and (latest["version"], latest["id"]) == (2, second["id"])
    assert call("GET", "/subjects/a-value/versions/1/schema") == (200, json.loads(V1["schema"]))
    with urllib.request.urlopen(registry.url + "/subjects") as response:
        assert response.headers["Content-Type"] == CONTENT_TYPE


def test_error_codes(registry: RegistryProcess) -> None:
    call = registry.call
    assert call("GET", "/subjects/nope/versions")[1]["error_code"] == 40401
    assert call("GET", "/schemas/ids/12345") == (404, {"error_code": 40403, "message": "Schema not found"})
    assert call("POST", "/subjects/a-value/versions", {"schema": "{nope"})[0:1] == (422,)
    assert call("POST", "/subjects/a-value/versions", {"schema": "{nope"})[1]["error_code"] == 42201
    status, body = call("POST", "/subjects/a-value/versions", {**V1, "schemaType": "PROTOBUF"})
    assert (status, body["error_code"]) == (422, 42201) and "PROTOBUF" in body["message"]
    call("POST", "/subjects/a-value/versions", V1)
    assert call("GET", "/subjects/a-value/versions/9")[1]["error_code"] == 40402
    status, body = call("GET", "/subjects/a-value/versions/zero")
    assert (status, body["error_code"]) == (422, 42202)
    status, body = call("PUT", "/config", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)
    assert call("POST", "/subjects/a-value", V2)[1]["error_code"] == 40403


def test_incompatible_schema_is_refused_and_nothing_is_stored(registry: RegistryProcess) -> None:
    call = registry.call
    call("POST", "/subjects/a-value/versions", V1)
    status, body = call("POST", "/subjects/a-value/versions", NO_DEFAULT)
    assert (status, body["error_code"]) == (409, 409)
    assert call("GET", "/subjects/a-value/versions") == (200, [1])
    assert call("POST", "/subjects/a-value", NO_DEFAULT)[1]["error_code"] == 40403
    assert call("POST", "/compatibility/subjects/a-value/versions/latest", NO_DEFAULT) == (
        200, {"is_compatible": False})
    status, verbose = call("POST", "/compatibility/subjects/a-value/versions?verbose=true", NO_DEFAULT)
    assert status == 200 and not verbose["is_compatible"] and "age" in verbose["messages"][0]
    assert call("POST", "/compatibility/subjects/a-value/versions/1", V2) == (200, {"is_compatible": True})
    assert call("POST", "/subjects/a-value/versions", V2)[0] == 200


def test_soft_and_permanent_deletes(registry: RegistryProcess) -> None:
    call = registry.call
    call("POST", "/subjects/a-value/versions", V1)
    call("POST", "/subjects/a-value/versions", V2)
    assert call("DELETE", "/subjects/a-value/versions/1?permanent=true")[1]["error_code"] == 40407
    assert call("DELETE", "/subjects/a-value/versions/1") == (200, 1)
    assert call("GET", "/subjects/a-value/versions") == (200, [2])
    assert call("GET", "/subjects/a-value/versions?deleted=true") == (200, [1, 2])
    assert call("DELETE", "/subjects/a-value") == (200, [2])
    assert call("DELETE", "/subjects/a-value")[1]["error_code"] == 40404
    assert call("GET", "/subjects") == (200, [])
    assert call("GET", "/subjects?deleted=true") == (200, ["a-value"])
    assert call("DELETE", "/subjects/a-value?permanent=true") == (200, [1, 2])
    assert call("GET", "/subjects?deleted=true") == (200, [])


def test_config_and_mode(registry: RegistryProcess) -> None:
    call = registry.call
    assert call("GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call("PUT", "/config", {"compatibility": "FULL"}) == (200, {"compatibility": "FULL"})
    assert call("GET", "/config/a-value")[1]["error_code"] == 40408
    assert call("GET", "/config/a-value?defaultToGlobal=true") == (200, {"compatibilityLevel": "FULL"})
    assert call("PUT", "/config/a-value", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE"})
    call("POST", "/subjects/a-value/versions", V1)
    assert call("POST", "/subjects/a-value/versions", NO_DEFAULT)[0] == 200
    assert call("DELETE", "/config/a-value") == (200, {"compatibilityLevel": "NONE"})
    assert call("DELETE", "/config") == (200, {"compatibilityLevel": "FULL"})
    assert call("GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call("GET", "/mode") == (200, {"mode": "READWRITE"})
    assert call("PUT", "/mode", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    assert call("POST", "/subjects/b-value/versions", V1)[1]["error_code"] == 42205


def test_metrics_count_requests_by_endpoint_and_status(registry: RegistryProcess) -> None:
    registry.call("GET", "/subjects/nope/versions")
    with urllib.request.urlopen(registry.url + "/metrics") as response:
        text = response.read().decode()
    assert ('schema_registry_requests_total{endpoint="/subjects/{subject}/versions",method="GET",status="404"} 1.0'
            in text)
    assert "schema_registry_request_seconds_bucket" in text


def test_restart_keeps_everything(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with RegistryProcess(tmp_path / "first.log", data_dir=data) as first:
        schema_id = first.call("POST", "/subjects/a-value/versions", V1)[1]["id"]
        first.call("PUT", "/config/a-value", {"compatibility": "FULL"})
        assert first.stop() == 0
    with RegistryProcess(tmp_path / "second.log", data_dir=data) as second:
        assert second.call("GET", "/subjects/a-value/versions/1")[1]["id"] == schema_id
        assert second.call("GET", "/config/a-value") == (200, {"compatibilityLevel": "FULL"})
        assert second.call("POST", "/subjects/b-value/versions", V2)[1]["id"] > schema_id


def test_command_line_help_and_one_line_errors() -> None:
    run = [sys.executable, "-m", "schemas.registry"]
    shown = subprocess.run([*run, "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "--zookeeper" in shown.stdout and "--data-dir" in shown.stdout
    failed = subprocess.run([*run, "--zookeeper", "127.0.0.1:1/x", "--zookeeper-timeout", "1"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1
    assert failed.stderr.startswith("python -m schemas.registry: error: no ZooKeeper server")
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr


def test_properties_file_sets_what_the_options_do(tmp_path: Path) -> None:
    from tests.support.ports import free_port

    port = free_port()
    config = tmp_path / "registry.properties"
    config.write_text(f"# standalone registry\ndata.dir={tmp_path / 'state'}\nhost=127.0.0.1\nport={port}\n")
    log = tmp_path / "registry.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "schemas.registry", "--config", str(config)], cwd=REPO_ROOT,
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        answer = wait_until(lambda: _get(f"http://127.0.0.1:{port}/schemas/types"), 30, message="registry on --config")
        assert answer == ["AVRO"]
        assert (tmp_path / "state").is_dir()
    finally:
        process.terminate()
        assert process.wait(30) == 0, log.read_text()
    config.write_text("port=99999\n")
    bad = subprocess.run([sys.executable, "-m", "schemas.registry", "--config", str(config)], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == \
        "python -m schemas.registry: error: registry setting port=99999 is above its maximum 65535"


def _get(url: str) -> object:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.loads(answer.read())
    except OSError:
        return None


def test_bad_input_is_answered_and_the_registry_keeps_serving(registry: RegistryProcess) -> None:
    call = registry.call
    garbage = urllib.request.Request(registry.url + "/subjects/a-value/versions", data=b"{not json", method="POST",
                                     headers={"Content-Type": CONTENT_TYPE})
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(garbage)
    assert raised.value.code == 400 and json.loads(raised.value.read())["error_code"] == 400
    assert call("POST", "/subjects/a-value/versions", {"schema": 42})[1]["error_code"] == 42201
    no_fields = json.dumps({"type": "record", "name": "X"})
    assert call("POST", "/subjects/a-value/versions", {"schema": no_fields})[1]["error_code"] == 42201
    assert call("GET", "/schemas/ids/abc")[1]["error_code"] == 40403
    # Digits other than ASCII ones: str.isdigit() accepts '\u00b2', int() does not (a 500 with a traceback).
    assert call("GET", "/schemas/ids/%C2%B2")[1]["error_code"] == 40403
    assert call("GET", "/subjects/a-value/versions/%C2%B2")[1]["error_code"] == 42202
    deep = {"schema": "[" * 5000 + "]" * 5000}
    assert call("POST", "/subjects/a-value/versions", deep)[1]["error_code"] == 42201
    assert call("GET", "/no/such/path")[0] == 404
    assert call("PUT", "/mode", {"mode": ["READONLY"]})[1]["error_code"] == 42204
    assert call("POST", "/subjects/a-value/versions", V1)[0] == 200
