"""SCRAM (RFC 5802, with RFC 7677's SHA-256 and Kafka's SHA-512): the math, the messages and Kafka's credential format.

Shared by the broker (:class:`ScramServer`, the stored :class:`ScramCredential`) and the clients
(:class:`ScramClient`, and the salted password AlterUserScramCredentials carries). Kafka's rules: no channel
binding (the gs2 header is ``n,,``), at least 4096 iterations (at most 16384), the credential stored as
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Callable

__all__ = ["MECHANISMS", "MIN_ITERATIONS", "MAX_ITERATIONS", "ScramCredential", "ScramError", "ScramClient",
           "ScramServer", "salted_password", "credential_from_salted_password", "new_credential"]

#: SCRAM mechanism name -> hashlib name.
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_GS2_HEADER = "n,,"


class ScramError(Exception):
    """A SCRAM exchange failed: a malformed message, a wrong proof or a server that could not prove itself."""


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unsupported SCRAM mechanism {mechanism!r}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode("utf-8"), salt, iterations)


def _hmac(name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, name).digest()


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right))


@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps of a password: salt, StoredKey, ServerKey and the iteration count."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations})"

    def to_string(self) -> str:
        """Kafka's form: ``salt=..,stored_key=..,server_key=..,iterations=..`` (base64 values)."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_string(cls, text: str) -> "ScramCredential":
        """Parse Kafka's form; ValueError when a field is missing or malformed."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"malformed SCRAM credential: {exc}") from None


def credential_from_salted_password(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The stored credential from a salted password (as AlterUserScramCredentials carries it)."""
    name = _hash(mechanism)
    client_key = _hmac(name, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), _hmac(name, salted, b"Server Key"),
                           iterations)


def new_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
    """A credential for ``password`` with a fresh random salt (or the one given)."""
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                           iterations)


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (derive and compare the stored key)."""
    derived = credential_from_salted_password(
        mechanism, credential.salt, salted_password(mechanism, password, credential.salt, credential.iterations),
        credential.iterations)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


def _attributes(message: str) -> dict[str, str]:
    attributes = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ScramError(f"malformed SCRAM attribute {part[:20]!r}")
        attributes.setdefault(key, value)
    return attributes


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("SCRAM message is not UTF-8") from None


def escape_username(name: str) -> str:
    """saslname: ``=`` and ``,`` escaped as ``=3D`` and ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_username(text: str) -> str:
    """The user name a saslname stands for; ScramError on a stray ``=``."""
    if text.replace("=3D", "").replace("=2C", "").count("="):
        raise ScramError("malformed SCRAM user name")
    return text.replace("=2C", ",").replace("=3D", "=")


def _nonce() -> str:
    return base64.b64encode(secrets.token_bytes(18)).decode().replace("=", "")


class ScramClient:
    """The client's side of one exchange: first_message(), final_message(server_first), verify(server_final)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self._hash = _hash(mechanism)
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = nonce or _nonce()
        self._client_first_bare = ""
        self._server_signature = b""

    def first_message(self) -> bytes:
        self._client_first_bare = f"n={escape_username(self._username)},r={self._nonce}"
        return (_GS2_HEADER + self._client_first_bare).encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        text = _decode(server_first)
        attributes = _attributes(text)
        if "e" in attributes:
            raise ScramError(f"the server refused: {attributes['e']}")
        try:
            nonce, salt, iterations = attributes["r"], base64.b64decode(attributes["s"]), int(attributes["i"])
        except (KeyError, ValueError) as exc:
            raise ScramError(f"malformed server-first message: {exc}") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("the server's nonce does not extend ours")
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"the server asks for {iterations} iterations, fewer than {MIN_ITERATIONS}")
        name = self._hash
        salted = hashlib.pbkdf2_hmac(name, self._password.encode("utf-8"), salt, iterations)
        without_proof = f"c={base64.b64encode(_GS2_HEADER.encode()).decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode("utf-8")
        client_key = _hmac(name, salted, b"Client Key")
        client_signature = _hmac(name, hashlib.new(name, client_key).digest(), auth_message)
        self._server_signature = _hmac(name, _hmac(name, salted, b"Server Key"), auth_message)
        proof = base64.b64encode(_xor(client_key, client_signature)).decode()
        return f"{without_proof},p={proof}".encode("utf-8")

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's signature (it knows the password too); ScramError if it does not match."""
        attributes = _attributes(_decode(server_final))
        if "e" in attributes:
            raise ScramError(f"the server refused: {attributes['e']}")
        try:
            signature = base64.b64decode(attributes["v"])
        except (KeyError, ValueError):
            raise ScramError("malformed server-final message") from None
        if not self._server_signature or not hmac.compare_digest(signature, self._server_signature):
            raise ScramError("the server's signature does not match: it does not know the credential")


class ScramServer:
    """The server's side of one exchange: first(client_first) -> server_first, final(client_final) -> server_final.

    ``lookup(user)`` gives the user's credential for this mechanism, or None. An unknown user goes on with a
    made-up credential and fails at the proof, like a wrong password, so the answers do not tell them apart.
    """

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None],
                 nonce: str | None = None) -> None:
        self._hash = _hash(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce or _nonce()
        self.username = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self._client_first_bare = ""
        self._server_first = ""
        self._combined_nonce = ""

    def first(self, client_first: bytes) -> bytes:
        text = _decode(client_first)
        if not text.startswith(("n,", "y,")):
            raise ScramError("channel binding is not supported")
        _, authzid, bare = (text.split(",", 2) + ["", ""])[:3]
        attributes = _attributes(bare)
        try:
            self.username, client_nonce = unescape_username(attributes["n"]), attributes["r"]
        except KeyError:
            raise ScramError("malformed client-first message") from None
        if authzid and authzid != f"a={escape_username(self.username)}":
            raise ScramError("the authorization id must be the user name")
        if not client_nonce or "m" in attributes:
            raise ScramError("malformed client-first message")
        credential = self._lookup(self.username)
        self._known = credential is not None
        if credential is None:
            credential = new_credential(self.mechanism, secrets.token_hex(16), MIN_ITERATIONS,
                                        hashlib.sha256(self.username.encode()).digest())
        self._credential = credential
        self._client_first_bare = bare
        self._combined_nonce = client_nonce + self._nonce
        self._server_first = (f"r={self._combined_nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        return self._server_first.encode("utf-8")

    def final(self, client_final: bytes) -> bytes:
        if self._credential is None:
            raise ScramError("client-final message before client-first")
        text = _decode(client_final)
        without_proof, _, proof_part = text.rpartition(",p=")
        attributes = _attributes(without_proof)
        # Kafka's check, which librdkafka relies on: its client-final nonce is its own nonce followed by the whole
        # server nonce (client's + server's), so the nonce must end with ours rather than equal it.
        if not attributes.get("r", "").endswith(self._combined_nonce):
            raise ScramError("the client's nonce does not match")
        if attributes.get("c") not in ("biws", "eSws"):
            raise ScramError("channel binding is not supported")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("malformed client proof") from None
        name, credential = self._hash, self._credential
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        client_signature = _hmac(name, credential.stored_key, auth_message)
        client_key = _xor(proof, client_signature)
        if (len(proof) != len(client_signature) or not self._known
                or not hmac.compare_digest(hashlib.new(name, client_key).digest(), credential.stored_key)):
            raise ScramError("invalid credentials")
        signature = _hmac(name, credential.server_key, auth_message)
        return f"v={base64.b64encode(signature).decode()}".encode("utf-8")
