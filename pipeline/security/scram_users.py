"""A user's SCRAM credentials as Kafka stores them: the JSON of ``/config/users/<user>`` (and of a standalone
broker's credential file), ``{"version":1,"config":{"SCRAM-SHA-512":"salt=..,stored_key=..,server_key=..,iterations=.."}}``,
and the parsing of kafka-configs' ``--add-config 'SCRAM-SHA-512=[iterations=8192,password=...]'``.
"""

from __future__ import annotations

import json
import logging
from typing import Mapping

from pipeline.security.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential

log = logging.getLogger(__name__)

#: A user's credentials by mechanism.
UserCredentials = dict[str, ScramCredential]


def user_config_json(credentials: Mapping[str, ScramCredential]) -> bytes:
    """Kafka's user config for these credentials."""
    config = {mechanism: credential.to_string() for mechanism, credential in sorted(credentials.items())}
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()


def parse_user_config(data: bytes | None) -> UserCredentials:
    """The SCRAM credentials in a user config's JSON; other configs (quotas) and malformed entries are skipped."""
    if not data:
        return {}
    try:
        config = json.loads(data).get("config") or {}
    except (ValueError, AttributeError):
        log.warning("ignoring a malformed user config")
        return {}
    credentials = {}
    for mechanism, text in config.items():
        if mechanism in MECHANISMS and isinstance(text, str):
            try:
                credentials[mechanism] = ScramCredential.from_string(text)
            except ValueError:
                log.warning("ignoring a malformed %s credential", mechanism)
    return credentials


def parse_add_config(text: str) -> dict[str, tuple[str, int]]:
    """kafka-configs' ``SCRAM-SHA-512=[iterations=8192,password=secret],SCRAM-SHA-256=[password=secret]``:
    mechanism -> (password, iterations). ValueError when malformed or a mechanism is unknown."""
    result: dict[str, tuple[str, int]] = {}
    rest = text.strip()
    while rest:
        name, sep, rest = rest.partition("=")
        name = name.strip().lstrip(",").strip()
        if not sep or name not in MECHANISMS:
            raise ValueError(f"expected SCRAM-SHA-256=[...] or SCRAM-SHA-512=[...], got {name!r}")
        if not rest.startswith("["):
            raise ValueError(f"{name}: expected [password=...,iterations=...]")
        body, sep, rest = rest[1:].partition("]")
        if not sep:
            raise ValueError(f"{name}: missing ]")
        options = {}
        for part in body.split(","):
            key, eq, value = part.partition("=")
            if not eq:
                raise ValueError(f"{name}: expected key=value, got {part!r}")
            options[key.strip()] = value
        if not options.get("password"):
            raise ValueError(f"{name}: a password is required")
        try:
            iterations = int(options.get("iterations", MIN_ITERATIONS))
        except ValueError:
            raise ValueError(f"{name}: iterations must be an integer") from None
        result[name] = (options["password"], iterations)
        rest = rest.strip()
        if rest and not rest.startswith(","):
            raise ValueError(f"unexpected {rest[:20]!r} after {name}=[...]")
    if not result:
        raise ValueError("no SCRAM mechanism given")
    return result
