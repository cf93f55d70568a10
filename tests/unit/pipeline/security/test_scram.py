"""SCRAM against RFC 7677's SCRAM-SHA-256 example, both sides against each other for SHA-512, and Kafka's
stored credential format."""

from __future__ import annotations

import base64

import pytest

from pipeline.security.scram import (
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    credential_from_salted_password,
    escape_username,
    new_credential,
    password_matches,
    salted_password,
    unescape_username,
)

# RFC 7677 section 3.
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    return new_credential("SCRAM-SHA-256", "pencil", 4096, SALT)


def test_the_client_sends_the_rfc_7677_messages():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    assert client.first_message() == CLIENT_FIRST
    assert client.final_message(SERVER_FIRST) == CLIENT_FINAL
    client.verify_server_final(SERVER_FINAL)


def test_the_server_answers_the_rfc_7677_messages():
    server = ScramServer("SCRAM-SHA-256", {"user": rfc_credential()}.get, nonce=SERVER_NONCE)
    assert server.first(CLIENT_FIRST) == SERVER_FIRST
    assert server.final(CLIENT_FINAL) == SERVER_FINAL
    assert server.username == "user"


def test_a_server_signature_that_does_not_match_is_refused():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    client.first_message()
    client.final_message(SERVER_FIRST)
    with pytest.raises(ScramError, match="signature"):
        client.verify_server_final(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_both_sides_agree_and_a_wrong_password_or_unknown_user_fails_alike(mechanism):
    store = {"alice": new_credential(mechanism, "alice-secret")}
    for user, password, ok in (("alice", "alice-secret", True), ("alice", "wrong", False), ("bob", "x", False)):
        client, server = ScramClient(mechanism, user, password), ScramServer(mechanism, store.get)
        final = client.final_message(server.first(client.first_message()))
        if ok:
            client.verify_server_final(server.final(final))
        else:
            with pytest.raises(ScramError, match="^invalid credentials$"):
                server.final(final)


def test_user_names_with_commas_and_equals_are_escaped():
    assert escape_username("a=b,c") == "a=3Db=2Cc"
    assert unescape_username("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(ScramError):
        unescape_username("a=b")
    store = {"a=b,c": new_credential("SCRAM-SHA-512", "pw")}
    client, server = ScramClient("SCRAM-SHA-512", "a=b,c", "pw"), ScramServer("SCRAM-SHA-512", store.get)
    client.verify_server_final(server.final(client.final_message(server.first(client.first_message()))))
    assert server.username == "a=b,c"


def test_the_server_checks_the_nonce_and_channel_binding():
    server = ScramServer("SCRAM-SHA-256", {"user": rfc_credential()}.get, nonce=SERVER_NONCE)
    server.first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce"):
        server.final(CLIENT_FINAL.replace(b"k0,", b"k1,"))
    with pytest.raises(ScramError, match="channel binding"):
        ScramServer("SCRAM-SHA-256", {}.get).first(b"p=tls-unique,,n=user,r=abc")


def test_the_client_refuses_too_few_iterations_and_a_foreign_nonce():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    client.first_message()
    with pytest.raises(ScramError, match="iterations"):
        client.final_message(SERVER_FIRST.replace(b"i=4096", b"i=1000"))
    with pytest.raises(ScramError, match="nonce"):
        client.final_message(b"r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


def test_kafkas_credential_string_round_trips():
    credential = rfc_credential()
    text = credential.to_string()
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=") and text.endswith(",iterations=4096")
    assert ScramCredential.from_string(text) == credential
    assert "stored" not in repr(credential)
    with pytest.raises(ValueError):
        ScramCredential.from_string("salt=abc,iterations=4096")


def test_a_credential_from_a_salted_password_equals_one_from_the_password():
    salted = salted_password("SCRAM-SHA-512", "pw", b"salt", 4096)
    assert credential_from_salted_password("SCRAM-SHA-512", b"salt", salted, 4096) == \
        new_credential("SCRAM-SHA-512", "pw", 4096, b"salt")


def test_password_matches_derives_and_compares_the_stored_key():
    credential = new_credential("SCRAM-SHA-256", "pw")
    assert password_matches("SCRAM-SHA-256", credential, "pw")
    assert not password_matches("SCRAM-SHA-256", credential, "pW")
