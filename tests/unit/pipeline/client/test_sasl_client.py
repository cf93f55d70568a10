"""The client's SASL login against an in-process broker side (the broker's mechanisms): PLAIN and SCRAM succeed,
refusals and a server that cannot prove itself raise AuthenticationError, and the session lifetime comes back."""

from __future__ import annotations

import pytest

from broker.security.credential_store import CredentialStore
from broker.security.sasl_mechanisms import SaslAuthenticationFailed, server_mechanism
from pipeline.client.errors import AuthenticationError
from pipeline.client.sasl_client import authenticate
from pipeline.protocol.api_keys import ApiKey
from pipeline.security.client_settings import ClientSecurity
from pipeline.security.scram import new_credential


def fake_broker(lifetime_ms: int = 0, tamper: bool = False):
    store = CredentialStore()
    store.set_user("alice", {m: new_credential(m, "secret") for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")})
    state: dict = {}

    def request(api_key: int, body: dict, version: int) -> dict:
        if api_key == ApiKey.SASL_HANDSHAKE:
            if body["mechanism"] not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                return {"error_code": 33, "mechanisms": ["PLAIN"]}
            state["mechanism"] = server_mechanism(body["mechanism"], store)
            return {"error_code": 0, "mechanisms": []}
        mechanism = state["mechanism"]
        try:
            answer = mechanism.evaluate(body["auth_bytes"])
        except SaslAuthenticationFailed as exc:
            return {"error_code": 58, "error_message": str(exc), "auth_bytes": b"", "session_lifetime_ms": 0}
        if tamper and mechanism.complete:
            answer = b"v=" + b"AAAA" * 22
        return {"error_code": 0, "error_message": None, "auth_bytes": answer,
                "session_lifetime_ms": lifetime_ms if mechanism.complete else 0}
    return request


def login(mechanism: str, password: str = "secret") -> ClientSecurity:
    return ClientSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, username="alice", password=password)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_each_mechanism_logs_in_and_returns_the_session_lifetime(mechanism):
    assert authenticate(fake_broker(5000), login(mechanism), 1, "b:1") == 5000


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_refusal_raises_a_non_retriable_authentication_error(mechanism):
    with pytest.raises(AuthenticationError, match="refused the SASL login of 'alice'") as raised:
        authenticate(fake_broker(), login(mechanism, "wrong"), 1, "b:1")
    assert not raised.value.retriable


def test_a_server_that_cannot_prove_it_knows_the_credential_is_refused():
    with pytest.raises(AuthenticationError, match="signature"):
        authenticate(fake_broker(tamper=True), login("SCRAM-SHA-512"), 1, "b:1")
