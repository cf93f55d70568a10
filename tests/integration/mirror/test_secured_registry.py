"""The mirror's audit against a registry that wants a login over HTTPS: with basic.auth.user.info and
schema.registry.ssl.ca.location it registers the AuditCount schema and publishes its counts; with a wrong password
it stops at start-up with the registry's 401 in one line."""

from __future__ import annotations

from pathlib import Path

from schemas.events import AUDIT_TOPIC
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroDecoder
from tests.support.cluster import BrokerCluster
from tests.support.http_security import http_security_files
from tests.support.mirror import MirrorProcess, committed, create_topic, mirror_args, mirror_error, produce, read_all
from tests.support.polling import wait_until
from tests.support.registry import RegistryProcess

WINDOW_MS = 60_000
BASE_MS = 1_700_000_040_000 - 1_700_000_040_000 % WINDOW_MS


def test_the_mirror_audits_through_a_secured_registry(clusters: dict[str, BrokerCluster], tmp_path: Path) -> None:
    dc1, offline = clusters["dc1"], clusters["offline"]
    secured = http_security_files(tmp_path / "security")
    create_topic(dc1, "events", 1)
    produce(dc1, "events", [(b"k%d" % i, b"v" * 20, BASE_MS + i, []) for i in range(50)])
    with RegistryProcess(tmp_path / "registry.log", data_dir=tmp_path / "registry",
                         extra_args=tuple(secured.settings()), auth=secured.logins["reader"],
                         ca_file=secured.ca_file) as registry:
        args = [a for a in mirror_args({"dc1": dc1}, offline, "events") if a != "--no-audit"]
        args += ["--registry", registry.url, "--set", f"schema.registry.ssl.ca.location={secured.ca_file}",
                 "--set", f"audit.window.ms={WINDOW_MS}"]
        writer, password = secured.logins["writer"]
        _, error = mirror_error(tmp_path / "refused.log", [*args, "--set", f"basic.auth.user.info={writer}:wrong"])
        assert "HTTP 401, error code 40101" in error and "wrong" not in error
        mirror = MirrorProcess(tmp_path / "mirror.log",
                               [*args, "--set", f"basic.auth.user.info={writer}:{password}"]).start()
        try:
            wait_until(lambda: committed(dc1, "mirror", "events", 0) == 50, 60,
                       message=lambda: f"everything committed: {mirror.log_tail(5)}")
            assert mirror.stop() == 0, mirror.log_tail()
        finally:
            mirror.kill()
        with SchemaRegistryClient(registry.url, settings=registry.client_settings()) as client:
            decoder = AvroDecoder(client)
            counts = [decoder.decode(r.value, AUDIT_TOPIC)
                      for records in read_all(offline, AUDIT_TOPIC, 1).values() for r in records]
    assert sum(c["count"] for c in counts if c["tier"] == "mirror" and c["topic"] == "events") == 50
