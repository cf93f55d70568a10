"""The broker's SASL mechanisms: PLAIN and SCRAM-SHA-256/512, each a small state machine fed the client's tokens.

PLAIN (RFC 4616): one token ``authzid NUL authcid NUL password``. Kafka checks it against a JAAS user list;
this broker has no such list and checks PLAIN passwords against the user's SCRAM credentials instead: it
derives the stored key from the password with the stored salt and iterations and compares (SCRAM-SHA-512's
credential if the user has one, else SCRAM-SHA-256's). So one ``pipeline users`` entry serves both mechanisms.

SCRAM (RFC 5802/7677): client-first -> server-first, client-final -> server-final (pipeline.security.scram).

Every refusal is :class:`SaslAuthenticationFailed`, whose message to the client is the same for a wrong
password, an unknown user and a malformed token; ``username`` names the user tried, for the broker's log.
"""

from __future__ import annotations

from typing import Protocol

from broker.security.credential_store import CredentialStore
from pipeline.security.scram import MECHANISMS, ScramError, ScramServer, password_matches

PLAIN = "PLAIN"
#: The mechanisms this broker can serve (sasl.enabled.mechanisms picks among them).
SUPPORTED_MECHANISMS = (PLAIN, *MECHANISMS)


class SaslAuthenticationFailed(Exception):
    """The client could not be authenticated; ``str()`` is the answer it gets, ``reason`` is for the log only."""

    def __init__(self, mechanism: str, username: str, reason: str) -> None:
        super().__init__(f"Authentication failed during authentication due to invalid credentials with SASL "
                         f"mechanism {mechanism}")
        self.username = username
        self.reason = reason


class SaslServerMechanism(Protocol):
    """One exchange: ``evaluate`` each client token until ``complete``; then ``username`` is authenticated."""

    mechanism: str
    complete: bool
    username: str
    # Whether evaluate() derives keys from a password (slow: the broker runs it off its event loop).
    derives_keys: bool

    def evaluate(self, token: bytes) -> bytes: ...


class PlainServer:
    """PLAIN checked against the SCRAM credentials (see the module docstring).

    Checking a password derives its key (PBKDF2, thousands of iterations: milliseconds), so the broker runs
    ``evaluate`` off its event loop (``derives_keys``)."""

    mechanism = PLAIN
    derives_keys = True

    def __init__(self, store: CredentialStore) -> None:
        self._store = store
        self.complete = False
        self.username = ""

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3 or self.complete:
            raise SaslAuthenticationFailed(PLAIN, "", "malformed PLAIN token")
        try:
            authzid, username, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed(PLAIN, "", "PLAIN token is not UTF-8") from None
        if not username or not password:
            raise SaslAuthenticationFailed(PLAIN, username, "empty user name or password")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(PLAIN, username, "the authorization id differs from the user name")
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            credential = self._store.get(username, mechanism)
            if credential is not None:
                if not password_matches(mechanism, credential, password):
                    raise SaslAuthenticationFailed(PLAIN, username, "wrong password")
                self.complete, self.username = True, username
                return b""
        raise SaslAuthenticationFailed(PLAIN, username, "unknown user")


class ScramSaslServer:
    """SCRAM-SHA-256 or SCRAM-SHA-512 against the credential store (stored keys: no key derivation here)."""

    derives_keys = False

    def __init__(self, mechanism: str, store: CredentialStore) -> None:
        self.mechanism = mechanism
        self._scram = ScramServer(mechanism, lambda user: store.get(user, mechanism))
        self._store = store
        self._step = 0
        self.complete = False
        self.username = ""

    def evaluate(self, token: bytes) -> bytes:
        step, self._step = self._step, self._step + 1
        try:
            if step == 0:
                answer = self._scram.first(token)
                self.username = self._scram.username
                return answer
            if step == 1:
                answer = self._scram.final(token)
                self.complete = True
                return answer
        except ScramError as exc:
            known = self._store.get(self._scram.username, self.mechanism) is not None
            reason = str(exc) if known or step == 0 else "unknown user"
            raise SaslAuthenticationFailed(self.mechanism, self._scram.username, reason) from None
        raise SaslAuthenticationFailed(self.mechanism, self.username, "token after the exchange ended")


def server_mechanism(mechanism: str, store: CredentialStore) -> SaslServerMechanism:
    """A fresh exchange of ``mechanism`` (one of SUPPORTED_MECHANISMS)."""
    if mechanism == PLAIN:
        return PlainServer(store)
    return ScramSaslServer(mechanism, store)
