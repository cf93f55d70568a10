"""HTTP users in Jetty's property-file form, as Confluent's services read it: ``user: password[,role ...]``.

The schema registry and the audit's dashboard read the same file (``authentication.users.file``). A password may be
stored as Jetty stores it -- ``MD5:<hex>``, ``CRYPT:<unix crypt>``, or ``OBF:`` (Jetty's obfuscation: reversible,
no better than plain text) -- or hashed by :func:`hash_password`
(``PBKDF2:sha256:<iterations>:<salt>:<hash>`` or ``SCRYPT:<n>:<r>:<p>:<salt>:<hash>``, base64), or in plain text
(accepted, with a warning). Every comparison takes constant time, and an unknown user costs as much as a known
one stored the same way. The file is read again when it changes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import stat
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

__all__ = ["User", "UsersFile", "hash_password", "verify_password", "PASSWORD_SCHEMES"]

LOG = logging.getLogger(__name__)

PASSWORD_SCHEMES = ("PBKDF2", "SCRYPT", "MD5", "CRYPT", "OBF", "PLAIN")
# Forms that hold the password itself, for all practical purposes: warned about.
REVERSIBLE_SCHEMES = ("PLAIN", "OBF")
PBKDF2_ITERATIONS = 600_000
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
RELOAD_CHECK_S = 1.0


@dataclass(frozen=True)
class User:
    """One line of the file: the name, the stored credential (never shown) and the roles."""

    name: str
    credential: str
    roles: frozenset[str]

    def __repr__(self) -> str:
        return f"User({self.name!r}, roles={sorted(self.roles)})"

    @property
    def scheme(self) -> str:
        head = self.credential.partition(":")[0].upper()
        return head if head in PASSWORD_SCHEMES and ":" in self.credential else "PLAIN"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def hash_password(password: str, scheme: str = "PBKDF2") -> str:
    """``password`` in a stored form the file accepts: PBKDF2 (HMAC-SHA-256, 600,000 iterations) or SCRYPT, each
    with a random 16-byte salt."""
    salt = secrets.token_bytes(16)
    if scheme.upper() == "PBKDF2":
        derived = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, PBKDF2_ITERATIONS)
        return f"PBKDF2:sha256:{PBKDF2_ITERATIONS}:{_b64(salt)}:{_b64(derived)}"
    if scheme.upper() == "SCRYPT":
        derived = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
        return f"SCRYPT:{SCRYPT_N}:{SCRYPT_R}:{SCRYPT_P}:{_b64(salt)}:{_b64(derived)}"
    raise ValueError(f"cannot hash with {scheme!r}: PBKDF2 or SCRYPT")


def _unix_crypt(password: str, stored: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # Jetty's CRYPT: form; gone from Python 3.13, where such entries are refused

    return crypt.crypt(password, stored) or ""


def _deobfuscate(text: str) -> bytes:
    """The password of Jetty's ``OBF:`` form: 4 base-36 digits per byte (``U`` and 4 digits for a byte >= 128)."""
    out = bytearray()
    at = 0
    while at < len(text):
        if text[at] == "U":
            out.append(int(text[at + 1:at + 5], 36) >> 8)
            at += 5
        else:
            value = int(text[at:at + 4], 36)
            out.append((value // 256 + value % 256 - 254) // 2 & 0xFF)
            at += 4
    return bytes(out)


def verify_password(password: str, credential: str) -> bool:
    """Whether ``password`` matches the stored ``credential`` (any form of the file), in constant time."""
    given = password.encode()
    scheme, _, rest = credential.partition(":")
    scheme = scheme.upper() if rest else "PLAIN"
    try:
        if scheme == "PBKDF2":
            digest, iterations, salt, expected = rest.split(":")
            derived = hashlib.pbkdf2_hmac(digest, given, base64.b64decode(salt), int(iterations))
            return hmac.compare_digest(derived, base64.b64decode(expected))
        if scheme == "SCRYPT":
            n, r, p, salt, expected = rest.split(":")
            wanted = base64.b64decode(expected)
            derived = hashlib.scrypt(given, salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                                     maxmem=256 * 1024 * 1024, dklen=len(wanted))
            return hmac.compare_digest(derived, wanted)
        if scheme == "MD5":
            return hmac.compare_digest(hashlib.md5(given).hexdigest(), rest.strip().lower())
        if scheme == "CRYPT":
            return hmac.compare_digest(_unix_crypt(password, rest).encode(), rest.encode())
        if scheme == "OBF":
            return hmac.compare_digest(given, _deobfuscate(rest.strip()))
    except (ValueError, TypeError, ImportError):
        return False
    if scheme in PASSWORD_SCHEMES:
        return hmac.compare_digest(given, credential.encode())
    # "word:something" that is no scheme of ours: a plain password holding a colon.
    return hmac.compare_digest(given, credential.encode())


def parse_users(text: str, source: str = "users file") -> dict[str, User]:
    """The users of a file's ``text``: ``user: credential[,role ...]`` per line (``=`` works too, as in Java
    properties), ``#`` and ``!`` comment lines. Raises ValueError naming the line of a malformed entry."""
    users: dict[str, User] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        separators = [i for i in (line.find(":"), line.find("=")) if i >= 0]
        if not separators:
            raise ValueError(f"{source}:{number}: expected 'user: password[,role...]'")
        at = min(separators)
        name, value = line[:at].strip(), line[at + 1:].strip()
        credential, *roles = [part.strip() for part in value.split(",")]
        if not name or not credential:
            raise ValueError(f"{source}:{number}: a user needs a name and a password")
        if name in users:
            raise ValueError(f"{source}:{number}: user {name!r} is given twice")
        users[name] = User(name, credential, frozenset(role for role in roles if role))
    return users


class UsersFile:
    """The users of a file, read again (at most once a second) when it changes; :meth:`check` verifies a login.

    A login that succeeded is remembered (as a keyed hash of the password, in memory) until the file changes,
    so that a client sending its credentials with every request pays the slow hash once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._users: dict[str, User] = {}
        self._stamp: tuple[float, int] | None = None
        self._checked = 0.0
        self._key = secrets.token_bytes(32)
        self._verified: dict[str, bytes] = {}
        self._decoy = ""
        self._load()

    def _load(self) -> None:
        try:
            info = self.path.stat()
            text = self.path.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read the users file {self.path}: {exc.strerror or exc}") from None
        users = parse_users(text, str(self.path))
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            LOG.warning("the users file %s can be read by others than its owner (chmod 600 it)", self.path)
        plain = sorted(user.name for user in users.values() if user.scheme in REVERSIBLE_SCHEMES)
        if plain:
            LOG.warning("the users file %s stores the password of %s in plain text or OBF: (hash it: PBKDF2 or "
                        "SCRYPT, python -m pipeline.security.password_file)", self.path, ", ".join(plain))
        self._users, self._stamp, self._verified = users, (info.st_mtime, info.st_size), {}
        # An unknown user is checked against a known user's stored form, so that both cost the same time.
        self._decoy = next(iter(users.values())).credential if users else hash_password(secrets.token_urlsafe(16))

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_S:
            return
        self._checked = now
        try:
            info = self.path.stat()
        except OSError:
            return  # keep the users known until the file is back
        if (info.st_mtime, info.st_size) != self._stamp:
            try:
                self._load()
                LOG.info("read the users file %s again (%d users)", self.path, len(self._users))
            except ValueError as exc:
                LOG.error("%s; keeping the users read before", exc)

    def users(self) -> dict[str, User]:
        with self._lock:
            self._refresh()
            return dict(self._users)

    def _tag(self, password: str) -> bytes:
        return hmac.new(self._key, password.encode(), hashlib.sha256).digest()

    def remembered(self, name: str, password: str) -> User | None:
        """The user ``name`` if ``password`` is the one that logged in last (fast: no password hash); None when
        that is not known, which :meth:`check` then decides."""
        with self._lock:
            self._refresh()
            user = self._users.get(name)
            remembered = self._verified.get(name)
        if user is not None and remembered is not None and hmac.compare_digest(remembered, self._tag(password)):
            return user
        return None

    def check(self, name: str, password: str) -> User | None:
        """The user ``name`` if ``password`` is theirs, else None (slow on purpose for a wrong password)."""
        found = self.remembered(name, password)
        if found is not None:
            return found
        with self._lock:
            user, decoy = self._users.get(name), self._decoy
        if user is None:
            verify_password(password, decoy)
            return None
        if not verify_password(password, user.credential):
            return None
        with self._lock:
            if self._users.get(name) is user:
                self._verified[name] = self._tag(password)
        return user



def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.security.password_file [--scheme PBKDF2|SCRYPT]``: the stored form of a password read
    from the terminal (or one line of stdin), for a users file."""
    import argparse
    import getpass
    import sys

    parser = argparse.ArgumentParser(prog="python -m pipeline.security.password_file",
                                     description="Hash a password for a users file (user: HASH[,role...]).")
    parser.add_argument("--scheme", choices=("PBKDF2", "SCRYPT"), default="PBKDF2")
    args = parser.parse_args(argv)
    password = getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
    if not password:
        print("error: an empty password", file=sys.stderr)
        return 2
    print(hash_password(password, args.scheme))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
