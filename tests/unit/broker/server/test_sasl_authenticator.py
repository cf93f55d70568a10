"""The SASL authenticator's state machine, fed request frames as the socket server would: what is served before
authentication, v0 raw tokens and v1 SaslAuthenticate, failures answered then closed and counted, reauthentication
and session expiry, the deadline and the token size cap."""

from __future__ import annotations

import asyncio
import inspect
import struct
import threading
import time

import pytest

from broker.security.credential_store import CredentialStore
from broker.server.sasl_authenticator import (CloseAfterResponse, Refused, SaslServerAuthenticator,
                                              SaslServerConfig)
from broker.server.session import Session
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import decode_response, encode_request
from pipeline.protocol.errors import ErrorCode
from pipeline.security.principal import ANONYMOUS, KafkaPrincipal
from pipeline.security.scram import ScramClient, new_credential

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def store() -> CredentialStore:
    credentials = CredentialStore()
    credentials.set_user("alice", {m: new_credential(m, "alice-secret") for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")})
    credentials.set_user("bob", {"SCRAM-SHA-256": new_credential("SCRAM-SHA-256", "bob-secret")})
    return credentials


class Harness:
    """One connection's authenticator with a handler that records what reached it."""

    def __init__(self, **config: object) -> None:
        self.config = SaslServerConfig(MECHANISMS, store(), **config)
        self.session = Session("10.0.0.1:5000", listener_name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT")
        self.handled: list[int] = []
        self.session.authenticator = SaslServerAuthenticator(self.session, self.config, self.handler)
        self.correlation = 0

    def handler(self, frame: memoryview, session: Session) -> list:
        self.handled.append(struct.unpack_from(">h", frame)[0])
        return [b"handled"]

    def send(self, api_key: int, version: int, body: dict):
        self.correlation += 1
        frame = memoryview(encode_request(api_key, version, self.correlation, "test", body))[4:]
        return self.handle(frame)

    def handle(self, frame: memoryview):
        """What the authenticator answers, with a step it evaluates off the loop run to its end (as the socket
        server awaits it while the exchange is under way)."""
        authenticator = self.session.authenticator
        exchanging = authenticator.exchanging
        answer = authenticator.handle(frame)
        if exchanging and inspect.isawaitable(answer):
            return asyncio.run(answer)
        return answer

    def request(self, api_key: int, version: int, body: dict) -> dict:
        response = b"".join(bytes(chunk) for chunk in self.send(api_key, version, body))
        return decode_response(api_key, version, response[4:])[1]

    def failure(self, api_key: int, version: int, body: dict) -> dict | None:
        with pytest.raises(CloseAfterResponse) as raised:
            self.send(api_key, version, body)
        if raised.value.response is None:
            return None
        response = b"".join(bytes(chunk) for chunk in raised.value.response)
        return decode_response(api_key, version, response[4:])[1]

    def plain(self, user: str, password: str, version: int = 1) -> dict:
        self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        return self.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": f"\0{user}\0{password}".encode()})


def test_api_versions_is_passed_on_and_other_requests_refused_before_authentication():
    harness = Harness()
    assert harness.send(ApiKey.API_VERSIONS, 0, {}) == [b"handled"]
    with pytest.raises(Refused, match="METADATA"):
        harness.send(ApiKey.METADATA, 1, {"topics": None})
    assert harness.handled == [ApiKey.API_VERSIONS]
    assert harness.session.principal == ANONYMOUS


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_over_sasl_authenticate_sets_the_principal_and_lets_go(mechanism):
    harness = Harness()
    answer = harness.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    assert answer == {"error_code": 0, "mechanisms": list(MECHANISMS)}
    client = ScramClient(mechanism, "alice", "alice-secret")
    first = harness.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first_message()})
    final = harness.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.final_message(bytes(first["auth_bytes"]))})
    client.verify_server_final(bytes(final["auth_bytes"]))
    assert final["session_lifetime_ms"] == 0
    assert harness.session.principal == KafkaPrincipal.user("alice")
    assert harness.session.sasl_mechanism == mechanism
    assert harness.session.authenticator is None
    assert harness.config.stats.succeeded == {("SASL_PLAINTEXT", mechanism): 1}


def test_handshake_v0_is_followed_by_raw_tokens():
    harness = Harness()
    harness.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    assert harness.handle(memoryview(b"\0alice\0alice-secret")) == [b"\0\0\0\0"]
    assert harness.session.principal == KafkaPrincipal.user("alice")


def test_a_raw_token_failure_closes_without_an_answer():
    harness = Harness()
    harness.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    with pytest.raises(CloseAfterResponse) as raised:
        harness.handle(memoryview(b"\0alice\0nope"))
    assert raised.value.response is None and raised.value.delay_s == 0.1


@pytest.mark.parametrize(("user", "password"), [("alice", "guess-1234"), ("nobody", "alice-secret")])
def test_plain_failures_are_answered_alike_counted_and_closed(user, password, caplog):
    harness = Harness()
    harness.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    answer = harness.failure(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": f"\0{user}\0{password}".encode()})
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer["error_message"] == ("Authentication failed during authentication due to invalid credentials with "
                                       "SASL mechanism PLAIN")
    assert harness.config.stats.failed == {("SASL_PLAINTEXT", "PLAIN"): 1}
    assert f"user {user!r}" in caplog.text and "10.0.0.1:5000" in caplog.text and password not in caplog.text
    assert harness.session.principal == ANONYMOUS


def test_plain_checks_the_scram_sha_256_credential_when_the_user_has_no_sha_512_one():
    assert Harness().plain("bob", "bob-secret")["error_code"] == 0


def test_a_scram_failure_for_an_unknown_user_happens_at_the_proof():
    harness = Harness()
    harness.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
    client = ScramClient("SCRAM-SHA-512", "nobody", "x")
    first = harness.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.first_message()})
    assert first["error_code"] == 0 and bytes(first["auth_bytes"]).startswith(b"r=")
    answer = harness.failure(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.final_message(bytes(first["auth_bytes"]))})
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_an_unknown_mechanism_is_answered_with_the_enabled_ones_then_closed():
    harness = Harness()
    answer = harness.failure(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert answer == {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(MECHANISMS)}


def test_sasl_authenticate_before_the_handshake_is_refused():
    with pytest.raises(Refused):
        Harness().send(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"x"})


def test_oversized_frames_are_refused_before_authentication():
    harness = Harness(max_receive_size=64)
    with pytest.raises(Refused, match="sasl.server.max.receive.size"):
        harness.send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "P" * 100})


def test_the_exchange_has_a_deadline():
    harness = Harness(timeout_s=5.0)
    authenticator = harness.session.authenticator
    now = time.monotonic()
    assert not authenticator.timed_out(now)
    assert authenticator.timed_out(now + 6)


def test_with_a_session_lifetime_requests_pass_until_it_ends_then_a_handshake_renews_it(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("broker.server.sasl_authenticator.time.monotonic", lambda: clock[0])
    harness = Harness(reauth_ms=10_000)
    assert harness.plain("alice", "alice-secret")["session_lifetime_ms"] == 10_000
    authenticator = harness.session.authenticator
    assert authenticator is not None and not authenticator.timed_out(clock[0] + 100)
    assert harness.send(ApiKey.METADATA, 1, {"topics": None}) == [b"handled"]
    clock[0] += 9
    assert harness.plain("alice", "alice-secret")["error_code"] == 0
    clock[0] += 9
    assert harness.send(ApiKey.METADATA, 1, {"topics": None}) == [b"handled"]
    clock[0] += 2
    with pytest.raises(Refused, match="session expired"):
        harness.send(ApiKey.METADATA, 1, {"topics": None})


def test_reauthentication_must_keep_the_principal_and_the_mechanism():
    harness = Harness(reauth_ms=10_000)
    harness.plain("alice", "alice-secret")
    harness.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    answer = harness.failure(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0bob\0bob-secret"})
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert harness.session.principal == KafkaPrincipal.user("alice")
    other = Harness(reauth_ms=10_000)
    other.plain("alice", "alice-secret")
    assert other.failure(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == \
        ErrorCode.UNSUPPORTED_SASL_MECHANISM


def test_sasl_authenticate_v0_gives_no_session_lifetime():
    harness = Harness(reauth_ms=10_000)
    assert harness.plain("alice", "alice-secret", version=0)["error_code"] == 0
    assert harness.session.authenticator is None


def test_the_socket_server_is_not_needed_for_a_coroutine_handler():
    # The handler's answer passes through untouched, awaitables included (a long-polling fetch after login).
    harness = Harness(reauth_ms=10_000)
    harness.plain("alice", "alice-secret")

    async def later() -> list:
        return [b"later"]
    harness.session.authenticator.handler = lambda frame, session: later()
    awaitable = harness.send(ApiKey.FETCH, 4, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1,
                                               "isolation_level": 0, "topics": []})
    assert asyncio.run(awaitable) == [b"later"]


@pytest.mark.parametrize("version", [0, 1])
def test_plain_derives_the_key_off_the_event_loop(version, monkeypatch):
    # PBKDF2 takes milliseconds: the exchange answers an awaitable that checks the password on another thread.
    import broker.security.sasl_mechanisms as mechanisms
    checked_on: list[int] = []
    real = mechanisms.password_matches

    def recording(*args):
        checked_on.append(threading.get_ident())
        return real(*args)
    monkeypatch.setattr(mechanisms, "password_matches", recording)
    harness = Harness()
    harness.request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": "PLAIN"})
    if version == 0:
        answer = harness.session.authenticator.handle(memoryview(b"\0alice\0alice-secret"))
    else:
        harness.correlation += 1
        answer = harness.session.authenticator.handle(memoryview(encode_request(
            ApiKey.SASL_AUTHENTICATE, 1, harness.correlation, "test", {"auth_bytes": b"\0alice\0alice-secret"}))[4:])
    assert inspect.isawaitable(answer) and checked_on == []

    async def on_the_loop() -> list:
        loop_thread = threading.get_ident()
        result = await answer
        assert checked_on and loop_thread not in checked_on
        return result
    assert asyncio.run(on_the_loop())
    assert harness.session.principal == KafkaPrincipal.user("alice")
