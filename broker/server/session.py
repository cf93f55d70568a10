"""Session: what the broker knows about one client connection, handed with every request to the handler.

Kafka's RequestContext and Session in one: the client's address, the listener it came in through (its name
and security protocol) and the principal it authenticated as -- ``User:ANONYMOUS`` until a SASL exchange or a
client certificate says otherwise. The network layer creates it at accept; authentication fills in the
principal; the request handlers read it to authorize each request.
"""

from __future__ import annotations

from typing import Any

from pipeline.security.principal import ANONYMOUS, KafkaPrincipal

PLAINTEXT = "PLAINTEXT"


class Session:
    """One connection's identity; ``peer`` is ``host:port``, ``address`` the host alone."""

    __slots__ = ("peer", "address", "listener_name", "security_protocol", "principal", "authenticator",
                 "sasl_mechanism")

    def __init__(self, peer: str, *, listener_name: str = PLAINTEXT, security_protocol: str = PLAINTEXT,
                 principal: KafkaPrincipal = ANONYMOUS) -> None:
        self.peer = peer
        self.address = peer.rpartition(":")[0] if ":" in peer else peer
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.principal = principal
        # The SASL exchange of a SASL_* listener while it runs (None once done, or on other listeners).
        self.authenticator: Any = None
        self.sasl_mechanism: str | None = None

    def __repr__(self) -> str:
        return f"Session({self.peer}, {self.listener_name}, {self.principal})"
