"""Who may do what in the registry with authentication on: three levels of roles, each implying the one below.

- read: every GET, and looking a schema up under a subject (``POST /subjects/{subject}``);
- write: registering schemas and compatibility checks (``POST .../versions``, ``POST /compatibility/...``);
- admin: the global and subject compatibility and the mode (``PUT``/``DELETE /config``, ``PUT /mode``), and
  deleting subjects and versions.

Which roles of the users file hold each level is set by ``authorization.{read,write,admin}.roles``.
"""

from __future__ import annotations

from typing import Any, Mapping

from aiohttp import web

from pipeline.config import Property
from pipeline.security.http_auth import ANY_ROLE, HttpIdentity
from pipeline.security.http_settings import Names, parse_names

__all__ = ["ACCESS_PROPERTIES", "Access", "READ", "WRITE", "ADMIN", "level_of"]

READ, WRITE, ADMIN = 1, 2, 3


ACCESS_PROPERTIES = (
    Property("authorization.read.roles", parse_names, Names((ANY_ROLE,)),
             "with BASIC: roles that may read (GET, look schemas up), comma-separated (*: every user let in)"),
    Property("authorization.write.roles", parse_names, Names(("write",)),
             "with BASIC: roles that may also register schemas and check compatibility"),
    Property("authorization.admin.roles", parse_names, Names(("admin",)),
             "with BASIC: roles that may also change compatibility (/config) and mode, and delete subjects"),
)

# (method, route) -> the level needed, for requests above READ; any other request needs READ.
_NEEDS = {
    ("POST", "/subjects/{subject}/versions"): WRITE,
    ("POST", "/compatibility/subjects/{subject}/versions"): WRITE,
    ("POST", "/compatibility/subjects/{subject}/versions/{version}"): WRITE,
    ("DELETE", "/subjects/{subject}"): ADMIN,
    ("DELETE", "/subjects/{subject}/versions/{version}"): ADMIN,
    ("PUT", "/config"): ADMIN,
    ("DELETE", "/config"): ADMIN,
    ("PUT", "/config/{subject}"): ADMIN,
    ("DELETE", "/config/{subject}"): ADMIN,
    ("PUT", "/mode"): ADMIN,
}


def level_of(method: str, route: str | None) -> int:
    """The level a request needs (``route``: the canonical path of its route; an unknown route needs READ and
    ends 404 or 405)."""
    return _NEEDS.get((method, route or ""), READ)


class Access:
    """The levels a user's roles grant, from the ``authorization.*.roles`` settings."""

    def __init__(self, config: Mapping[str, Any] | Any) -> None:
        self.roles = {READ: frozenset(config["authorization.read.roles"]),
                      WRITE: frozenset(config["authorization.write.roles"]),
                      ADMIN: frozenset(config["authorization.admin.roles"])}

    def level(self, roles: frozenset[str]) -> int:
        """The highest level ``roles`` hold (0: none)."""
        return max((level for level, holders in self.roles.items() if ANY_ROLE in holders or roles & holders),
                   default=0)

    def allows(self, request: web.Request, identity: HttpIdentity) -> bool:
        resource = request.match_info.route.resource
        return self.level(identity.roles) >= level_of(request.method, resource.canonical if resource else None)
