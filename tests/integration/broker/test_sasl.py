"""SASL on a standalone broker's SASL_PLAINTEXT listener, seen from raw sockets and our own client: what an
unauthenticated connection may do, SaslHandshake v0's raw tokens, the exchange deadline, reauthentication and
session expiry, a failed client beside a working one, and the users CLI (a new user can log in at once)."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from pipeline.cli import main as cli_main
from pipeline.client.admin import AdminClient
from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import AuthenticationError
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import decode_response, encode_request
from pipeline.protocol.errors import ErrorCode
from pipeline.security.client_settings import ClientSecurity
from pipeline.security.scram import ScramClient
from tests.support import wire
from tests.support.polling import wait_until
from tests.support.sasl import sasl_broker

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
METADATA = {"topics": None, "allow_auto_topic_creation": False}


def security(user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> ClientSecurity:
    return ClientSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, username=user, password=password)


def connect(broker, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> BrokerConnection:
    connection = BrokerConnection(broker.host, broker.port, security=security(user, password, mechanism), timeout_s=10)
    connection.connect()
    return connection


def raw_request(sock: socket.socket, api_key: int, version: int, body: dict, correlation_id: int = 1) -> dict:
    sock.sendall(encode_request(api_key, version, correlation_id, "raw", body))
    return decode_response(api_key, version, wire.read_frame(sock))[1]


def closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the broker closes ``sock`` within ``timeout`` (reading whatever it still sends)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, socket.timeout):
        return False
    return True


@pytest.fixture
def broker(broker_factory):
    return sasl_broker(broker_factory, USERS, {"socket.request.read.timeout.ms": 2000})


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_our_client_logs_in_and_is_served(broker, mechanism):
    with connect(broker, "alice", "alice-secret", mechanism) as connection:
        assert connection.request(ApiKey.METADATA, METADATA)["brokers"][0]["port"] == broker.port


@pytest.mark.parametrize(("user", "password"), [("alice", "guess-1234"), ("mallory", "alice-secret")])
def test_a_wrong_password_and_an_unknown_user_get_the_same_answer(broker, user, password):
    with pytest.raises(AuthenticationError) as raised:
        connect(broker, user, password)
    assert "Authentication failed during authentication due to invalid credentials" in str(raised.value)
    assert f"user {user!r}" in broker.log_text()
    assert password not in broker.log_text()


def test_before_authentication_only_api_versions_and_sasl_handshake_are_served(broker):
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        assert raw_request(sock, ApiKey.API_VERSIONS, 0, {})["error_code"] == ErrorCode.NONE
        sock.sendall(encode_request(ApiKey.METADATA, 1, 2, "raw", METADATA))
        assert closed(sock)


def test_an_unsupported_mechanism_is_answered_then_closed(broker):
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        answer = raw_request(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert set(answer["mechanisms"]) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert closed(sock)


def test_sasl_handshake_v0_is_followed_by_raw_tokens(broker):
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        assert raw_request(sock, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-256"})["error_code"] == 0
        scram = ScramClient("SCRAM-SHA-256", "alice", "alice-secret")

        def token(data: bytes) -> bytes:
            sock.sendall(struct.pack(">i", len(data)) + data)
            return wire.read_frame(sock)
        scram.verify_server_final(token(scram.final_message(token(scram.first_message()))))
        assert raw_request(sock, ApiKey.METADATA, 1, METADATA, 5)["brokers"]


def test_a_connection_that_does_not_finish_authenticating_is_closed(broker):
    started = time.monotonic()
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        raw_request(sock, ApiKey.API_VERSIONS, 0, {})
        assert closed(sock, timeout=15)
    assert time.monotonic() - started < 12


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_failed_client_does_not_disturb_a_logged_in_one(broker, mechanism):
    with connect(broker, "alice", "alice-secret", mechanism) as good:
        for _ in range(5):
            with pytest.raises(AuthenticationError):
                connect(broker, "alice", "guess", mechanism)
            assert good.request(ApiKey.METADATA, METADATA)["brokers"]


def test_a_session_that_is_not_renewed_ends_and_our_client_renews_it(broker_factory):
    broker = sasl_broker(broker_factory, USERS, {"connections.max.reauth.ms": 1500})
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        raw_request(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        logged_in = time.monotonic()
        answer = raw_request(sock, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"}, 2)
        assert answer["error_code"] == 0 and answer["session_lifetime_ms"] == 1500
        correlation_ids = iter(range(3, 1000))

        def session_ended() -> bool:
            """Whether the broker closed the connection instead of answering one more request."""
            sock.sendall(encode_request(ApiKey.METADATA, 1, next(correlation_ids), "raw", METADATA))
            try:
                assert decode_response(ApiKey.METADATA, 1, wire.read_frame(sock))[1]["brokers"]
            except (ConnectionError, EOFError, OSError):
                return True
            return False

        wait_until(session_ended, timeout=10, interval=0.1, message="the broker to end the expired session")
        assert time.monotonic() - logged_in >= 1.5, "the broker ended the session before its lifetime"
    with connect(broker, "alice", "alice-secret") as connection:
        logins = []

        def renewed_twice() -> bool:
            assert connection.request(ApiKey.METADATA, METADATA)["brokers"]
            due = connection._reauthenticate_at
            if not logins or logins[-1] != due:
                logins.append(due)
            return len(logins) >= 3

        wait_until(renewed_twice, timeout=10, interval=0.1, message="our client to log in again twice")


def test_reauthentication_as_another_user_is_refused(broker_factory):
    broker = sasl_broker(broker_factory, USERS, {"connections.max.reauth.ms": 60000})
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        raw_request(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        raw_request(sock, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"}, 2)
        assert raw_request(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, 3)["error_code"] == 0
        answer = raw_request(sock, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0admin\0admin-secret"}, 4)
        assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert closed(sock)


def test_users_cli_adds_describes_and_deletes_and_a_new_user_logs_in_at_once(broker, tmp_path, capsys):
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                            'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="admin" password="admin-secret";\n')
    common = ["users", "--bootstrap-server", broker.bootstrap, "--command-config", str(admin_config)]
    assert cli_main([*common, "--alter", "--entity-type", "users", "--entity-name", "bob", "--add-config",
                     "SCRAM-SHA-512=[iterations=8192,password=bob-secret],SCRAM-SHA-256=[password=bob-256]"]) == 0
    with connect(broker, "bob", "bob-secret") as connection:
        assert connection.request(ApiKey.METADATA, METADATA)["brokers"]
    connect(broker, "bob", "bob-256", "SCRAM-SHA-256").close()
    capsys.readouterr()
    assert cli_main([*common, "--describe", "--entity-name", "bob"]) == 0
    assert capsys.readouterr().out.strip() == ("SCRAM credential configs for user-principal 'bob' are "
                                               "SCRAM-SHA-256=iterations=4096,SCRAM-SHA-512=iterations=8192")
    assert cli_main([*common, "--alter", "--delete-config", "SCRAM-SHA-512,SCRAM-SHA-256", "--entity-name", "bob"]) == 0
    with pytest.raises(AuthenticationError):
        connect(broker, "bob", "bob-secret")
    assert cli_main([*common, "--describe"]) == 0
    assert "'bob'" not in capsys.readouterr().out
    # Kept across a restart (the standalone broker's credential file, owner-only).
    broker.restart()
    assert (broker.log_dir / "scram-credentials.json").stat().st_mode & 0o077 == 0
    connect(broker, "admin", "admin-secret").close()


def test_the_admin_client_reports_refused_credentials(broker):
    with AdminClient(broker.bootstrap, security=security("admin", "admin-secret")) as admin:
        with pytest.raises(Exception, match="UNACCEPTABLE_CREDENTIAL"):
            admin.alter_user_scram_credentials({"carol": {"SCRAM-SHA-512": ("pw", 1000)}})
        with pytest.raises(Exception, match="RESOURCE_NOT_FOUND"):
            admin.describe_user_scram_credentials(["carol"])
        assert set(admin.describe_user_scram_credentials()) == {"admin", "alice"}


def test_our_producer_stops_at_once_on_a_refused_login_and_works_with_the_right_one(broker):
    from pipeline.client.producer import Producer, ProducerData

    settings = {"metadata.broker.list": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "request.required.acks": 1}
    started = time.monotonic()
    with pytest.raises(AuthenticationError):
        with Producer({**settings, "sasl.password": "guess-1234"}) as producer:
            producer.send(ProducerData("sasl-ours", None, [b"x"]))
    assert time.monotonic() - started < 10
    with Producer({**settings, "sasl.password": "alice-secret"}) as producer:
        producer.send(ProducerData("sasl-ours", None, [b"m1", b"m2"]))


def test_users_cli_without_a_login_on_a_sasl_listener_says_what_is_missing(broker, capsys):
    assert cli_main(["users", "--bootstrap-server", broker.bootstrap, "--describe"]) == 3
    assert "--command-config" in capsys.readouterr().err
