"""SASL test helpers: a standalone broker on a SASL_PLAINTEXT listener whose users are seeded in its log dir, and
each stock client's SASL settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

from broker.security.credential_store import FILE_NAME
from pipeline.security.scram import new_credential
from tests.support.broker import BrokerProcess
from tests.support.ports import free_port

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def seed_users(log_dir: Path, users: Mapping[str, str]) -> None:
    """Write ``{user: password}`` as the standalone broker's credential file (both SCRAM mechanisms each)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    data = {"users": {user: {mechanism: new_credential(mechanism, password).to_string() for mechanism in MECHANISMS}
                      for user, password in users.items()}}
    (log_dir / FILE_NAME).write_text(json.dumps(data))
    (log_dir / FILE_NAME).chmod(0o600)


def sasl_broker(factory: Callable[..., BrokerProcess], users: Mapping[str, str],
                overrides: Mapping[str, object] | None = None) -> BrokerProcess:
    """A started standalone broker listening on SASL_PLAINTEXT only, knowing ``users``."""
    port = free_port("127.0.0.1")
    broker = factory(overrides={"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", **(overrides or {})},
                     start=False, port=port)
    seed_users(broker.log_dir, users)
    return broker.start()


def librdkafka_settings(user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    """confluent-kafka's (librdkafka's) SASL_PLAINTEXT settings."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


def kafka_python_settings(user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    """kafka-python's and aiokafka's SASL_PLAINTEXT settings."""
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}
