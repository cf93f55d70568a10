"""HTTP basic authentication: the challenge, roles let in, the decision hook, failed logins counted, logged
(never the password) and throttled."""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter

from pipeline.security.http_auth import (
    IDENTITY_KEY,
    BasicAuthenticator,
    FailedLogins,
    basic_auth_middleware,
)
from pipeline.security.password_file import UsersFile


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, roles: tuple[str, ...] = ("*",), **failures: Any) -> tuple[web.Application, Counter, Clock]:
    path = tmp_path / "users"
    path.write_text("alice: pw,read\nbob: pw2,admin\ncarol: pw3,guest\n")
    path.chmod(0o600)
    counter = Counter("failed_logins_total", "", ["reason"], registry=CollectorRegistry())
    clock = Clock()
    authenticator = BasicAuthenticator(UsersFile(path), 'Reg "x"', FailedLogins(counter, "test", clock=clock,
                                                                                  **failures), roles)

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"user": request[IDENTITY_KEY].user})

    async def open_(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application(middlewares=[basic_auth_middleware(
        authenticator, error, allowed=lambda request, identity: request.method == "GET" or "admin" in identity.roles,
        skip_paths=("/open",))])
    app.router.add_route("*", "/", hello)
    app.router.add_get("/open", open_)
    return app, counter, clock


def run(app: web.Application, calls: Any) -> Any:
    async def go() -> Any:
        async with TestClient(TestServer(app)) as client:
            return await calls(client)
    return asyncio.run(go())


def test_no_or_wrong_credentials_get_the_challenge(tmp_path: Path) -> None:
    app, counter, _ = make(tmp_path)

    async def calls(client: TestClient) -> list[Any]:
        answers = []
        for headers in ({}, basic("alice", "nope"), basic("mallory", "pw"), {"Authorization": "Basic !!!"},
                        {"Authorization": "Bearer x"}):
            response = await client.get("/", headers=headers)
            answers.append((response.status, response.headers.get("WWW-Authenticate"), await response.json()))
        return answers

    for status, challenge, body in run(app, calls):
        assert status == 401 and challenge == 'Basic realm="Reg \\"x\\""' and body == {"error": "Unauthorized"}
    assert counter.labels("bad_credentials")._value.get() == 2
    assert counter.labels("malformed")._value.get() == 2  # no credentials at all is no failed login


def test_roles_and_the_decision(tmp_path: Path) -> None:
    app, _, _ = make(tmp_path, roles=("read", "admin"))

    async def calls(client: TestClient) -> list[Any]:
        out = []
        for method, headers in (("GET", basic("alice", "pw")), ("POST", basic("alice", "pw")),
                                ("POST", basic("bob", "pw2")), ("GET", basic("carol", "pw3")), ("GET", {})):
            response = await client.request(method, "/", headers=headers)
            out.append((response.status, await response.json()))
        response = await client.get("/open")
        out.append((response.status, None))
        return out

    answers = run(app, calls)
    assert answers[0] == (200, {"user": "alice"})
    assert answers[1][0] == 403 and "alice" in answers[1][1]["error"]
    assert answers[2] == (200, {"user": "bob"})
    assert answers[3][0] == 403  # carol's role is not let in
    assert answers[4][0] == 401
    assert answers[5][0] == 200  # a skipped path


def test_failed_logins_are_logged_without_the_password_rate_limited_and_throttled(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app, _, clock = make(tmp_path, max_failures=3, window_s=60, log_every_s=10)

    async def calls(client: TestClient) -> list[int]:
        statuses = []
        for _ in range(4):
            statuses.append((await client.get("/", headers=basic("alice", "hunter2"))).status)
        statuses.append((await client.get("/", headers=basic("alice", "pw"))).status)
        clock.now = 61
        statuses.append((await client.get("/", headers=basic("alice", "pw"))).status)
        return statuses

    with caplog.at_level(logging.WARNING, logger="pipeline.security.http_auth"):
        statuses = run(app, calls)
    assert statuses == [401, 401, 401, 429, 429, 200]
    assert caplog.text.count("failed login of user 'alice' from 127.0.0.1") == 1
    assert "hunter2" not in caplog.text


def test_a_quiet_period_logs_again_with_the_count_left_out() -> None:
    counter = Counter("f_total", "", ["reason"], registry=CollectorRegistry())
    clock = Clock()
    failures = FailedLogins(counter, "svc", log_every_s=10, clock=clock)
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("pipeline.security.http_auth")
    logger.addHandler(handler)
    try:
        for now in (0, 1, 2, 11):
            clock.now = now
            failures.record("10.0.0.1", "bob", "bad_credentials")
    finally:
        logger.removeHandler(handler)
    assert len(logged) == 2 and "(2 more since the last report)" in logged[1]
