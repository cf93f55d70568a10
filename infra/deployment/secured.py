"""The settings that secure each process of the deployment (``security: on``), written as owner-only properties files.

Brokers listen on SASL_SSL only (clients and inter-broker, SCRAM-SHA-512, the ``broker`` user), with the ACL
authorizer on and nothing allowed without an ACL; ``broker`` and ``admin`` are super users. Every service connects
as its own SCRAM user over TLS, trusting the deployment's CA, and creates its znodes with ZooKeeper ACLs under the
deployment's digest. The registry and the audit's dashboard serve HTTPS with basic authentication. Each process
reads its file with ``--config`` (``var/secrets/services/NAME.properties``): passwords never appear on a command line.
People use ``var/secrets/admin.properties`` with the CLI (``--command-config``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from infra.deployment.secrets import ADMIN, BROKER, Secrets, write_private
from infra.deployment.topology import ClusterSpec, Topology
from pipeline.security.command_config import CommandConfig, read_command_config
from schemas.registry_client_settings import NO_REGISTRY_SECURITY, RegistryClientSettings

__all__ = ["MECHANISM", "LISTENER", "admin_command_config", "admin_registry_settings", "audit_settings", "broker_settings", "client_settings",
           "emulator_settings", "etl_settings", "mirror_settings", "registry_settings", "service_config",
           "write_client_properties", "write_properties", "write_service_configs", "zookeeper_settings"]

MECHANISM = "SCRAM-SHA-512"
LISTENER = "SASL_SSL"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
# The users whose client properties are written for people and tools (admin) and for each service.
CLIENT_USERS = (ADMIN, "emulators", "mirror", "etl", "audit")


def write_properties(path: Path, settings: Mapping[str, str], comment: str) -> None:
    """A properties file, owner-only, rewritten only when its content changes."""
    text = f"# {comment}\n" + "".join(f"{key}={value}\n" for key, value in settings.items())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists() or path.read_text() != text:
        write_private(path, text)


def client_settings(secrets: Secrets, user: str) -> dict[str, str]:
    """How ``user`` connects to the brokers: SASL_SSL, SCRAM-SHA-512, trusting the deployment's CA."""
    return {"security.protocol": LISTENER, "sasl.mechanism": MECHANISM, "sasl.username": user,
            "sasl.password": secrets.password(user), "ssl.ca.location": str(secrets.ca_file)}


def zookeeper_settings(secrets: Secrets) -> dict[str, str]:
    """The deployment's ZooKeeper identity, and ACLs on what the process creates."""
    return {"zookeeper.set.acl": "true", "zookeeper.digest.file": str(secrets.zookeeper_digest_file)}


def jaas(user: str, password: str) -> str:
    return f'{SCRAM_LOGIN} required username="{user}" password="{password}";'


def broker_settings(topology: Topology, secrets: Secrets, cluster: ClusterSpec, broker_id: int) -> dict[str, str]:
    """A broker's listener, TLS, SASL, authorizer and ZooKeeper settings (Kafka's property names)."""
    endpoint = f"{LISTENER}://{topology.host}:{cluster.broker_port(broker_id)}"
    certificate = secrets.certificate(f"broker-{cluster.name}-{broker_id}")
    return {
        "listeners": endpoint, "advertised.listeners": endpoint, "inter.broker.listener.name": LISTENER,
        "ssl.keystore.location": str(certificate.bundle), "ssl.truststore.location": str(secrets.ca_file),
        "ssl.client.auth": "none",
        "sasl.enabled.mechanisms": MECHANISM, "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config":
            jaas(BROKER, secrets.password(BROKER)),
        "authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{BROKER};User:{ADMIN}",
        **zookeeper_settings(secrets),
    }


def service_config(topology: Topology, name: str) -> Path:
    """The properties file the program ``name`` reads with --config."""
    return topology.secrets_dir / "services" / f"{name}.properties"


def write_client_properties(secrets: Secrets) -> None:
    """``var/secrets/USER.properties`` for each user of :data:`CLIENT_USERS` (admin's with the ZooKeeper identity,
    for the commands that write there)."""
    for user in CLIENT_USERS:
        settings = client_settings(secrets, user)
        if user == ADMIN:
            settings.update(zookeeper_settings(secrets))
        write_properties(secrets.client_properties(user), settings,
                         f"the {user} user's client properties (--command-config); keep it secret")


def admin_command_config(topology: Topology) -> CommandConfig:
    """How the deployment's own tools (up, status, chaos, drills) connect: as admin when secured."""
    if not topology.security:
        return CommandConfig()
    return read_command_config(Secrets.of(topology).client_properties(ADMIN))


def registry_client_settings(secrets: Secrets, user: str) -> dict[str, str]:
    """How a service reaches the registry: as ``user`` over HTTPS, trusting the deployment's CA."""
    return {"basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": f"{user}:{secrets.password(user)}",
            "schema.registry.ssl.ca.location": str(secrets.ca_file)}


def registry_settings(topology: Topology, secrets: Secrets) -> dict[str, str]:
    """The registry: HTTPS with its certificate, basic authentication against its users file, ZooKeeper ACLs."""
    return {"listeners": f"https://{topology.host}:{topology.registry.port}",
            "ssl.keystore.location": str(secrets.certificate("registry").bundle),
            "authentication.method": "BASIC", "authentication.realm": "SchemaRegistry",
            "authentication.users.file": str(secrets.registry_users_file), **zookeeper_settings(secrets)}


def audit_settings(topology: Topology, secrets: Secrets) -> dict[str, str]:
    """The audit: its readers as the audit user; its dashboard, API and /metrics over HTTPS with basic
    authentication (admin for people, prometheus for the scrapes)."""
    return {**client_settings(secrets, "audit"), **registry_client_settings(secrets, "audit"),
            "http.ssl.keystore.location": str(secrets.certificate("audit").bundle),
            "http.authentication.method": "BASIC", "http.authentication.users.file": str(secrets.dashboard_users_file)}


def mirror_settings(topology: Topology, secrets: Secrets) -> dict[str, str]:
    """The mirror: its consumers (every datacenter) and its producer (offline) as the mirror user; its groups'
    znodes protected."""
    client = client_settings(secrets, "mirror")
    return {**{f"consumer.{key}": value for key, value in client.items()},
            **{f"consumer.{key}": value for key, value in zookeeper_settings(secrets).items()},
            **{f"producer.{key}": value for key, value in client.items()},
            **registry_client_settings(secrets, "mirror")}


def etl_settings(topology: Topology, secrets: Secrets) -> dict[str, str]:
    """The ETL: the driver and its Spark tasks as the etl user; its lock, schedule and offsets protected."""
    return {**client_settings(secrets, "etl"), **zookeeper_settings(secrets), **registry_client_settings(secrets, "etl")}


def emulator_settings(topology: Topology, secrets: Secrets) -> dict[str, str]:
    """The emulators: their events and AuditCounts as the emulators user."""
    return {**client_settings(secrets, "emulators"), **registry_client_settings(secrets, "emulators")}


def write_service_configs(topology: Topology, secrets: Secrets, programs: Iterable[Any]) -> None:
    """Every secured program's --config file, from its ``secured`` settings."""
    for program in programs:
        if program.secured is not None:
            write_properties(service_config(topology, program.name), program.secured(secrets),
                             f"{program.name}'s settings, written by `up` (security: on); keep it secret")


def admin_registry_settings(topology: Topology) -> RegistryClientSettings:
    """How the deployment's own tools reach the registry: as admin over HTTPS when secured."""
    if not topology.security:
        return NO_REGISTRY_SECURITY
    return RegistryClientSettings.from_config(registry_client_settings(Secrets.of(topology), ADMIN))
