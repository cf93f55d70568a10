"""KafkaPrincipal: who a connection is, as Kafka names it (``User:alice``, ``User:ANONYMOUS``)."""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal type and name; ``str()`` gives Kafka's ``Type:name`` form used in ACLs and ``super.users``."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        """``User:alice`` -> KafkaPrincipal("User", "alice"); the name may itself contain ``:`` (a certificate
        subject never does, but a SCRAM user name may)."""
        kind, sep, name = text.strip().partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{text!r} is not a principal: expected Type:name, e.g. User:alice")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> "KafkaPrincipal":
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
