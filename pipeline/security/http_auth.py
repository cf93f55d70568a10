"""HTTP basic authentication for the project's aiohttp services (the schema registry, the audit's dashboard).

:class:`BasicAuthenticator` checks an ``Authorization: Basic`` header against a :class:`UsersFile` and the roles
allowed in (Confluent's ``authentication.roles``); :func:`basic_auth_middleware` answers 401 with a
``WWW-Authenticate: Basic realm=...`` challenge without credentials or with wrong ones, 403 when the user's roles
may not make the request, and 429 to an address that failed too often. :class:`FailedLogins` counts every failed
login in a metric and logs them -- user and address, never the password -- at most once per address and period.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

from aiohttp import web

from .password_file import UsersFile

__all__ = ["HttpIdentity", "FailedLogins", "BasicAuthenticator", "basic_auth_middleware", "IDENTITY_KEY",
           "ANY_ROLE"]

LOG = logging.getLogger(__name__)
ANY_ROLE = "*"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ErrorResponse = Callable[[int, str], web.StreamResponse]


@dataclass(frozen=True)
class HttpIdentity:
    """Who made a request: the user and their roles."""

    user: str
    roles: frozenset[str]


IDENTITY_KEY = web.RequestKey("identity", HttpIdentity)


class FailedLogins:
    """Failed logins: counted (``counter``, a prometheus Counter labelled by ``reason``), logged at most once per
    address every ``log_every_s`` (with how many were not logged), and an address that failed ``max_failures``
    times within ``window_s`` is refused until its failures age out."""

    def __init__(self, counter: Any, service: str, *, max_failures: int = 20, window_s: float = 60.0,
                 log_every_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.counter = counter
        self.service = service
        self.max_failures = max_failures
        self.window_s = window_s
        self.log_every_s = log_every_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._logged: dict[str, tuple[float, int]] = {}

    def _recent(self, address: str, now: float) -> deque[float]:
        times = self._failures.get(address)
        if times is None:
            return deque()
        while times and now - times[0] > self.window_s:
            times.popleft()
        if not times:
            del self._failures[address]
        return times

    def blocked(self, address: str) -> bool:
        return len(self._recent(address, self._clock())) >= self.max_failures

    def record(self, address: str, user: str, reason: str) -> None:
        now = self._clock()
        self.counter.labels(reason).inc()
        times = self._recent(address, now)
        times.append(now)
        self._failures[address] = times
        if len(self._failures) > 10_000:  # many addresses: keep those that failed within the window
            self._failures = {a: t for a, t in self._failures.items() if now - t[-1] <= self.window_s}
        last, unlogged = self._logged.get(address, (float("-inf"), 0))
        if now - last < self.log_every_s:
            self._logged[address] = (last, unlogged + 1)
            return
        more = f" ({unlogged} more since the last report)" if unlogged else ""
        LOG.warning("%s: failed login of user %r from %s: %s%s", self.service, user, address, reason, more)
        self._logged[address] = (now, 0)
        if len(self._logged) > 10_000:  # forget quiet addresses rather than grow without bound
            self._logged = {a: v for a, v in self._logged.items() if now - v[0] < self.log_every_s}


def _credentials(header: str) -> tuple[str, str] | None:
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


class BasicAuthenticator:
    """Checks a request's basic credentials against ``users``; only users holding one of ``roles`` (``*``: any
    user) get in. A login verified before is recognised on the event loop (a keyed hash); a new one is verified
    on a worker thread, off the event loop (the password hash is slow on purpose)."""

    def __init__(self, users: UsersFile, realm: str, failures: FailedLogins, roles: Iterable[str] = (ANY_ROLE,)) -> None:
        self.users = users
        self.realm = realm
        self.failures = failures
        self.roles = frozenset(roles)

    @property
    def challenge(self) -> str:
        return 'Basic realm="%s"' % self.realm.replace("\\", "\\\\").replace('"', '\\"')

    def admits(self, roles: frozenset[str]) -> bool:
        return ANY_ROLE in self.roles or bool(roles & self.roles)

    async def authenticate(self, request: web.Request) -> HttpIdentity | None:
        """The request's identity, or None when it has no valid credentials (a failed login is recorded)."""
        header = request.headers.get("Authorization")
        if header is None:
            return None
        address = request.remote or "unknown"
        given = _credentials(header)
        if given is None:
            self.failures.record(address, "", "malformed")
            return None
        user = self.users.remembered(*given) or await asyncio.to_thread(self.users.check, *given)
        if user is None:
            self.failures.record(address, given[0], "bad_credentials")
            return None
        return HttpIdentity(user.name, user.roles)


def basic_auth_middleware(authenticator: BasicAuthenticator, error: ErrorResponse, *,
                          allowed: Callable[[web.Request, HttpIdentity], bool] = lambda request, identity: True,
                          skip_paths: Iterable[str] = ()) -> Any:
    """An aiohttp middleware letting through only authenticated requests that ``allowed`` accepts; ``error(status,
    message)`` builds the service's error answers. Paths in ``skip_paths`` need no credentials."""
    skipped = frozenset(skip_paths)

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in skipped:
            return await handler(request)
        if authenticator.failures.blocked(request.remote or "unknown"):
            answer = error(429, "Too many failed logins; try again later")
            answer.headers["Retry-After"] = str(int(authenticator.failures.window_s))
            return answer
        identity = await authenticator.authenticate(request)
        if identity is None:
            answer = error(401, "Unauthorized")
            answer.headers["WWW-Authenticate"] = authenticator.challenge
            return answer
        if not authenticator.admits(identity.roles) or not allowed(request, identity):
            return error(403, f"User {identity.user} is denied {request.method} {request.path}")
        request[IDENTITY_KEY] = identity
        return await handler(request)

    return authenticate
