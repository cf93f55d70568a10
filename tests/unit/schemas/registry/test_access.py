"""The registry's roles with BASIC authentication: read, write (register, compatibility), admin (config, mode,
deletes), each level implying the ones below; the answers as Confluent's (40101, 40301, the challenge)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from pipeline.config import ConfigError
from schemas.registry.access import ADMIN, READ, WRITE, Access, level_of
from schemas.registry.backends import DirectoryBackend
from schemas.registry.config import RegistryConfig
from schemas.registry.service import make_app
from schemas.registry.store import SchemaRegistryStore

SCHEMA = json.dumps({"type": "record", "name": "E", "fields": [{"name": "a", "type": "int"}]})


@pytest.mark.parametrize("method, route, level", [
    ("GET", "/subjects", READ), ("GET", "/config", READ), ("POST", "/subjects/{subject}", READ),
    ("POST", "/subjects/{subject}/versions", WRITE), ("POST", "/compatibility/subjects/{subject}/versions", WRITE),
    ("PUT", "/config", ADMIN), ("DELETE", "/config/{subject}", ADMIN), ("PUT", "/mode", ADMIN),
    ("DELETE", "/subjects/{subject}", ADMIN), ("DELETE", "/subjects/{subject}/versions/{version}", ADMIN),
    ("GET", None, READ)])
def test_the_level_each_request_needs(method: str, route: str | None, level: int) -> None:
    assert level_of(method, route) == level


def test_levels_of_roles_imply_the_ones_below() -> None:
    access = Access(RegistryConfig({"authorization.read.roles": "reader", "authorization.write.roles": "app",
                                    "authorization.admin.roles": "ops,root"}))
    assert access.level(frozenset({"reader"})) == READ
    assert access.level(frozenset({"app", "reader"})) == WRITE
    assert access.level(frozenset({"root"})) == ADMIN
    assert access.level(frozenset({"guest"})) == 0
    assert Access(RegistryConfig()).level(frozenset()) == READ  # read.roles=*: every user let in reads


def test_basic_needs_a_users_file_and_https_a_keystore() -> None:
    with pytest.raises(ConfigError, match="users.file"):
        RegistryConfig({"authentication.method": "BASIC"})
    with pytest.raises(ConfigError, match="keystore"):
        RegistryConfig({"listeners": "https://127.0.0.1:8081"})
    with pytest.raises(ConfigError, match="truststore"):
        RegistryConfig({"ssl.client.authentication": "REQUIRED"})
    with pytest.raises(ConfigError, match="listener"):
        RegistryConfig({"listeners": "ftp://x:1"})
    assert [str(x) for x in RegistryConfig({"port": "9"}).listeners] == ["http://0.0.0.0:9"]


def auth(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_the_registry_answers_by_role(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("reader: r,read\nwriter: w,write\nadmin: a,admin\n")
    users.chmod(0o600)
    config = RegistryConfig({"authentication.method": "BASIC", "authentication.users.file": str(users),
                             "authentication.skip.paths": "/metrics"})
    app = make_app(SchemaRegistryStore(DirectoryBackend(tmp_path / "data")), config.security, Access(config))

    async def calls(client: TestClient) -> list[tuple[int, Any]]:
        out = []
        for method, path, headers, body in (
                ("GET", "/subjects", {}, None),
                ("GET", "/subjects", auth("reader", "wrong"), None),
                ("GET", "/subjects", auth("reader", "r"), None),
                ("POST", "/subjects/s-value/versions", auth("reader", "r"), {"schema": SCHEMA}),
                ("POST", "/subjects/s-value/versions", auth("writer", "w"), {"schema": SCHEMA}),
                ("POST", "/compatibility/subjects/s-value/versions/latest", auth("writer", "w"), {"schema": SCHEMA}),
                ("PUT", "/mode", auth("writer", "w"), {"mode": "READONLY"}),
                ("DELETE", "/subjects/s-value", auth("writer", "w"), None),
                ("PUT", "/config", auth("admin", "a"), {"compatibility": "FULL"}),
                ("POST", "/subjects/s-value/versions", auth("admin", "a"), {"schema": SCHEMA}),
                ("GET", "/metrics", {}, None)):
            response = await client.request(method, path, headers=headers, json=body)
            text = await response.text()
            out.append((response.status, json.loads(text) if path != "/metrics" else text,
                        response.headers.get("WWW-Authenticate")))
        return out

    async def go() -> Any:
        async with TestClient(TestServer(app)) as client:
            return await calls(client)

    answers = asyncio.run(go())
    assert answers[0] == (401, {"error_code": 40101, "message": "Unauthorized"}, 'Basic realm="SchemaRegistry"')
    assert answers[1][:2] == (401, {"error_code": 40101, "message": "Unauthorized"})
    assert answers[2][:2] == (200, [])
    assert answers[3][0] == 403 and answers[3][1]["error_code"] == 40301
    assert answers[4][:2] == (200, {"id": 1})
    assert answers[5][:2] == (200, {"is_compatible": True})
    assert [a[0] for a in answers[6:8]] == [403, 403]
    assert answers[8][:2] == (200, {"compatibility": "FULL"})
    assert answers[9][:2] == (200, {"id": 1})
    metrics = answers[10][1]
    assert answers[10][0] == 200 and 'schema_registry_failed_logins_total{reason="bad_credentials"} 1.0' in metrics
    assert 'schema_registry_requests_total{endpoint="/subjects",method="GET",status="401"} 2.0' in metrics
