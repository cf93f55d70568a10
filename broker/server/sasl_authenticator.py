"""SaslServerAuthenticator: the SASL exchange of one connection on a SASL_PLAINTEXT or SASL_SSL listener.

Kafka's SaslServerAuthenticator, as a state machine the socket server feeds every frame of the connection
while ``session.authenticator`` is set:

- before authentication only ApiVersions (answered by the request handler) and SaslHandshake are served;
  any other request closes the connection, as Kafka does;
- SaslHandshake v0 is followed by raw length-prefixed SASL tokens (no request header), v1 by SaslAuthenticate
  requests; an unknown mechanism is answered UNSUPPORTED_SASL_MECHANISM, then the connection closes;
- success sets ``session.principal`` to ``User:<name>``; a failure is answered SASL_AUTHENTICATION_FAILED with a
  message that does not say whether the user or the password was wrong (raw tokens: the connection just
  closes), counted in :class:`AuthenticationStats`, logged (user tried, mechanism, client address, never a
  secret, rate-limited per address), and the connection closes once the answer is sent;
- bounded: the exchange must end within ``timeout_s`` of the connection's start (the socket server's scan
  closes it otherwise) and a token larger than ``max_receive_size`` closes the connection.

Reauthentication (``connections.max.reauth.ms`` > 0): SaslAuthenticate v1+ answers the session's lifetime, the
authenticator stays on the session and passes requests to the handler until it ends; then a new SaslHandshake
starts a reauthentication on the same connection (as the same principal) and any other request closes it.
Without a lifetime the authenticator leaves the session after success, so the requests that follow cost nothing.

A mechanism that derives keys from a password (PLAIN, checked against SCRAM credentials: PBKDF2) is evaluated on
the default executor's threads, and its step is answered by an awaitable, so that logins never stall the event
loop's other connections (hashlib releases the GIL while it derives).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from broker.security.credential_store import CredentialStore
from broker.security.sasl_mechanisms import SaslAuthenticationFailed, SaslServerMechanism, server_mechanism
from broker.server.session import Session
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import ProtocolError, RequestHeader, decode_request, encode_response, read_request_header
from pipeline.protocol.errors import ErrorCode
from pipeline.security.principal import KafkaPrincipal
from pipeline.warning_limiter import WarningLimiter

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">i")
_API_KEY = struct.Struct(">h")
# Kafka's sasl.server.max.receive.size default.
DEFAULT_MAX_RECEIVE_SIZE = 524288


class CloseAfterResponse(Exception):
    """Raised by the authenticator: send ``response`` (if any), wait ``delay_s``, then close the connection quietly
    (it was logged). The delay (Kafka's connection.failed.authentication.delay.ms) slows down password guessing and
    lets the client read the answer before the connection ends."""

    def __init__(self, response: list | None, delay_s: float = 0.0) -> None:
        super().__init__("closing after the SASL answer")
        self.response = response
        self.delay_s = delay_s


class Refused(Exception):
    """A request the exchange does not allow: close the connection, logging ``str()``."""


@dataclass
class AuthenticationStats:
    """Authentications by outcome, listener and mechanism (the broker exports them as metrics)."""

    failed: dict[tuple[str, str], int] = field(default_factory=dict)
    succeeded: dict[tuple[str, str], int] = field(default_factory=dict)

    def count(self, table: dict[tuple[str, str], int], listener: str, mechanism: str) -> None:
        key = (listener, mechanism)
        table[key] = table.get(key, 0) + 1


@dataclass
class SaslServerConfig:
    """What every authenticator of a listener shares."""

    mechanisms: tuple[str, ...]
    store: CredentialStore
    reauth_ms: int = 0
    timeout_s: float | None = 10.0
    max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE
    failed_delay_s: float = 0.1
    stats: AuthenticationStats = field(default_factory=AuthenticationStats)
    warnings: WarningLimiter = field(default_factory=lambda: WarningLimiter(log))


_HANDSHAKE_OR_VERSIONS, _TOKENS, _AUTHENTICATE, _COMPLETE = "handshake", "tokens", "authenticate", "complete"


class SaslServerAuthenticator:
    """One connection's SASL exchange; ``handle(frame)`` returns response chunks like a request handler."""

    def __init__(self, session: Session, config: SaslServerConfig,
                 handler: Callable[[memoryview, Session], Any]) -> None:
        self.session = session
        self.config = config
        self.handler = handler
        self.state = _HANDSHAKE_OR_VERSIONS
        self._mechanism: SaslServerMechanism | None = None
        self._deadline = (time.monotonic() + config.timeout_s) if config.timeout_s else None
        self._session_expires: float | None = None
        self._reauthenticating = False

    @property
    def exchanging(self) -> bool:
        """Whether the SASL exchange is under way (its answers may be awaitables; after it, the handler's are)."""
        return self.state != _COMPLETE

    def timed_out(self, now: float) -> bool:
        """Whether an exchange still running has passed its deadline (the socket server then closes)."""
        return self.state != _COMPLETE and self._deadline is not None and now > self._deadline

    def handle(self, frame: memoryview) -> Any:
        if self.state == _COMPLETE:
            # An authenticated session with a lifetime: only the api key and the clock are looked at.
            api_key = _API_KEY.unpack_from(frame)[0] if len(frame) >= 2 else -1
            if api_key != ApiKey.SASL_HANDSHAKE:
                if self._session_expires is not None and time.monotonic() > self._session_expires:
                    raise Refused(f"{_name(api_key)} after the session expired (connections.max.reauth.ms) "
                                  f"without reauthentication")
                return self.handler(frame, self.session)
            self._begin_reauthentication()
        if len(frame) > self.config.max_receive_size:
            raise Refused(f"SASL frame of {len(frame)} bytes exceeds sasl.server.max.receive.size")
        if self.state == _TOKENS:
            return self._token(bytes(frame))
        try:
            header = read_request_header(frame)
        except ProtocolError as exc:
            raise Refused(f"unreadable request header during SASL authentication: {exc}") from None
        if header.api_key == ApiKey.API_VERSIONS and self.state == _HANDSHAKE_OR_VERSIONS:
            return self.handler(frame, self.session)
        if header.api_key == ApiKey.SASL_HANDSHAKE and self.state == _HANDSHAKE_OR_VERSIONS:
            return self._handshake(header, frame)
        if header.api_key == ApiKey.SASL_AUTHENTICATE and self.state == _AUTHENTICATE:
            return self._authenticate(header, frame)
        raise Refused(f"unexpected {_name(header.api_key)} request during SASL authentication "
                      f"(client {header.client_id!r})")

    def _decode(self, header: RequestHeader, frame: memoryview) -> dict:
        try:
            return decode_request(header, frame, header.size)
        except ProtocolError as exc:
            raise Refused(f"malformed {_name(header.api_key)} v{header.api_version} request: {exc}") from None

    def _handshake(self, header: RequestHeader, frame: memoryview) -> list:
        if not 0 <= header.api_version <= 1:
            raise Refused(f"unsupported SaslHandshake version {header.api_version}")
        mechanism = self._decode(header, frame)["mechanism"]
        enabled = self.config.mechanisms
        if mechanism not in enabled or (self._reauthenticating and mechanism != self.session.sasl_mechanism):
            response = encode_response(header.api_key, header.api_version, header.correlation_id,
                                       {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                        "mechanisms": list(enabled)})
            self._failed("", f"unsupported mechanism {mechanism[:40]!r}")
            raise CloseAfterResponse(response, self.config.failed_delay_s)
        self._mechanism = server_mechanism(mechanism, self.config.store)
        self.session.sasl_mechanism = mechanism
        self.state = _TOKENS if header.api_version == 0 else _AUTHENTICATE
        return encode_response(header.api_key, header.api_version, header.correlation_id,
                               {"error_code": ErrorCode.NONE, "mechanisms": list(enabled)})

    def _evaluated(self, token: bytes) -> bytes | SaslAuthenticationFailed:
        """The mechanism's answer to ``token``, or its refusal (returned, so that it can cross threads)."""
        assert self._mechanism is not None
        try:
            return self._mechanism.evaluate(token)
        except SaslAuthenticationFailed as exc:
            return exc

    def _then(self, token: bytes, answer: Callable[[bytes | SaslAuthenticationFailed], list]) -> Any:
        """``answer`` the evaluation of ``token``: now, or, for a mechanism that derives keys, from an awaitable
        that evaluates it on the default executor."""
        assert self._mechanism is not None
        if not self._mechanism.derives_keys:
            return answer(self._evaluated(token))

        async def off_the_loop() -> list:
            outcome = await asyncio.get_running_loop().run_in_executor(None, self._evaluated, token)
            return answer(outcome)
        return off_the_loop()

    def _token(self, token: bytes) -> Any:
        return self._then(token, self._token_answer)

    def _token_answer(self, outcome: bytes | SaslAuthenticationFailed) -> list:
        if isinstance(outcome, SaslAuthenticationFailed):
            self._failed(outcome.username, outcome.reason)
            raise CloseAfterResponse(None, self.config.failed_delay_s)
        self._maybe_complete(version=0)
        return [_LENGTH.pack(len(outcome)) + outcome]

    def _authenticate(self, header: RequestHeader, frame: memoryview) -> Any:
        if not 0 <= header.api_version <= 2:
            raise Refused(f"unsupported SaslAuthenticate version {header.api_version}")
        request = self._decode(header, frame)
        return self._then(bytes(request["auth_bytes"]), lambda outcome: self._authenticate_answer(header, outcome))

    def _authenticate_answer(self, header: RequestHeader, outcome: bytes | SaslAuthenticationFailed) -> list:
        body: dict = {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0}
        if isinstance(outcome, SaslAuthenticationFailed):
            exc = outcome
            self._failed(exc.username, exc.reason)
            body.update(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc))
            raise CloseAfterResponse(encode_response(header.api_key, header.api_version, header.correlation_id,
                                                     body), self.config.failed_delay_s)
        body["auth_bytes"] = outcome
        try:
            body["session_lifetime_ms"] = self._maybe_complete(header.api_version)
        except SaslAuthenticationFailed as exc:
            body.update(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc), auth_bytes=b"")
            raise CloseAfterResponse(encode_response(header.api_key, header.api_version, header.correlation_id,
                                                     body), self.config.failed_delay_s) from None
        return encode_response(header.api_key, header.api_version, header.correlation_id, body)

    def _maybe_complete(self, version: int) -> int:
        """When the mechanism is done: set the principal and the session's lifetime (returned, in ms)."""
        mechanism = self._mechanism
        assert mechanism is not None
        if not mechanism.complete:
            return 0
        principal = KafkaPrincipal.user(mechanism.username)
        if self._reauthenticating and principal != self.session.principal:
            self._failed(mechanism.username, f"reauthentication as another principal than {self.session.principal}")
            raise SaslAuthenticationFailed(mechanism.mechanism, mechanism.username, "principal changed")
        self.session.principal = principal
        self.config.stats.count(self.config.stats.succeeded, self.session.listener_name, mechanism.mechanism)
        self.state = _COMPLETE
        self._mechanism = None
        lifetime_ms = self.config.reauth_ms if version >= 1 else 0
        if lifetime_ms > 0:
            self._session_expires = time.monotonic() + lifetime_ms / 1000
        else:
            # Nothing left to watch: the requests that follow go straight to the handler.
            self.session.authenticator = None
        log.debug("%s authenticated as %s with %s", self.session.peer, principal, mechanism.mechanism)
        return lifetime_ms

    def _begin_reauthentication(self) -> None:
        self.state = _HANDSHAKE_OR_VERSIONS
        self._reauthenticating = True
        if self.config.timeout_s:
            self._deadline = time.monotonic() + self.config.timeout_s

    def _failed(self, username: str, reason: str) -> None:
        mechanism = self.session.sasl_mechanism or "none"
        self.config.stats.count(self.config.stats.failed, self.session.listener_name, mechanism)
        # The socket server's FAILED_AUTHENTICATION kind: failed TLS handshakes and SASL exchanges count together.
        self.config.warnings.warn(self.session.address, "authentication_failed",
                                  "failed authentication from %s on listener %s: user %r, mechanism %s: %s",
                                  self.session.peer, self.session.listener_name, username[:100], mechanism, reason)


def _name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"
