"""The client's SASL login on a BrokerConnection: SaslHandshake v1, then SaslAuthenticate rounds (PLAIN or SCRAM).

Run right after ApiVersions on a SASL_PLAINTEXT or SASL_SSL connection, and again on the same connection before
the session lifetime the broker answered runs out (reauthentication, as Kafka's clients do). A refusal raises
:class:`~pipeline.client.errors.AuthenticationError`, which is not retriable.
"""

from __future__ import annotations

from typing import Callable

from pipeline.client.errors import AuthenticationError
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode
from pipeline.security.client_settings import ClientSecurity
from pipeline.security.scram import MECHANISMS, ScramClient, ScramError

#: Sends one request on the connection and returns the response body: (api key, body, version) -> body.
Request = Callable[[int, dict, int], dict]


def authenticate(request: Request, security: ClientSecurity, authenticate_version: int, broker: str) -> int:
    """Log in with ``security``'s mechanism and credentials; the session lifetime in ms (0: unlimited)."""
    mechanism = security.sasl_mechanism
    handshake = request(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism}, 1)
    if handshake["error_code"] != ErrorCode.NONE:
        offered = ", ".join(handshake.get("mechanisms") or []) or "none"
        raise AuthenticationError(f"broker {broker} refused SASL mechanism {mechanism} "
                                  f"({ErrorCode(handshake['error_code']).name}; it offers {offered})")

    def exchange(token: bytes) -> dict:
        response = request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}, authenticate_version)
        if response["error_code"] != ErrorCode.NONE:
            raise AuthenticationError(f"broker {broker} refused the SASL login of {security.username!r}: "
                                      f"{response.get('error_message') or ErrorCode(response['error_code']).name}")
        return response

    if mechanism not in MECHANISMS:
        token = b"\0" + security.username.encode("utf-8") + b"\0" + security.password.encode("utf-8")
        return exchange(token).get("session_lifetime_ms", 0)
    scram = ScramClient(mechanism, security.username, security.password)
    try:
        first = exchange(scram.first_message())
        final = exchange(scram.final_message(bytes(first["auth_bytes"])))
        scram.verify_server_final(bytes(final["auth_bytes"]))
    except ScramError as exc:
        raise AuthenticationError(f"SCRAM login to broker {broker} failed: {exc}") from None
    return final.get("session_lifetime_ms", 0)
