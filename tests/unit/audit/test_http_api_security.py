"""The audit's HTTP service secured: BASIC authentication on every path (/metrics too), HTTPS from a PEM keystore,
and a Prometheus proxy that forwards only the dashboard's own queries."""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from audit.config import AuditConfig
from audit.http_api import _DASHBOARD, DASHBOARD_QUERIES, AuditHttpServer
from audit.service import AuditService
from infra.deployment.certificates import CertificateAuthority
from pipeline.config import ConfigError


def test_the_allow_list_is_what_the_dashboard_asks() -> None:
    script = (_DASHBOARD / "dashboard.js").read_text()
    asked = set(re.findall(r'prometheus\("([^"]+)"\)', script))
    asked |= set(re.findall(r'"([^"]+)"', script[script.index("drawEtl(await"):script.index("].map(prometheus)")]))
    template = re.search(r"`(histogram_quantile\(\$\{q\}[^`]+)`", script).group(1)  # type: ignore[union-attr]
    asked |= {template.replace("${q}", q) for q in re.search(r'for \(const q of \[([^\]]+)\]', script)
              .group(1).replace('"', "").replace(" ", "").split(",")}  # type: ignore[union-attr]
    assert asked == DASHBOARD_QUERIES


class FakePrometheus(BaseHTTPRequestHandler):
    asked: list[tuple[str, dict[str, list[str]]]] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        FakePrometheus.asked.append((url.path, parse_qs(url.query)))
        body = json.dumps({"status": "success", "data": {"result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakePrometheus.asked = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def get(url: str, context: ssl.SSLContext, login: tuple[str, str] | None = None) -> tuple[int, Any, Any]:
    headers = {}
    if login:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(login).encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10,
                                    context=context) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def test_basic_authentication_https_and_the_proxy(tmp_path: Path, prometheus: str) -> None:
    authority = CertificateAuthority(tmp_path / "ca")
    server_cert = authority.issue("audit")
    users = tmp_path / "users"
    users.write_text("viewer: pw,dashboard\n")
    users.chmod(0o600)
    config = AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": str(tmp_path / "state"),
                          "prometheus.url": prometheus, "http.authentication.method": "BASIC",
                          "http.authentication.users.file": str(users),
                          "http.ssl.keystore.location": str(server_cert.bundle)})
    server = AuditHttpServer(AuditService(config), "127.0.0.1", 0).start()
    context = ssl.create_default_context(cafile=str(authority.cert_path))
    base = f"https://127.0.0.1:{server.port}"
    login = ("viewer", "pw")
    try:
        status, headers, _ = get(base + "/", context)
        assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="Audit"'
        assert get(base + "/api/windows", context, ("viewer", "nope"))[0] == 401
        assert get(base + "/metrics", context)[0] == 401
        status, _, page = get(base + "/", context, login)
        assert status == 200 and b"<html" in page.lower()
        status, _, metrics = get(base + "/metrics", context, login)
        assert status == 200 and b'audit_http_failed_logins_total{reason="bad_credentials"} 1.0' in metrics
        assert get(base + "/api/prometheus/query?query=up", context, login)[0] == 403
        assert get(base + "/api/prometheus/query?query=etl_last_run_rows&time=1", context, login)[0] == 403
        assert get(base + "/api/prometheus/alerts?x=1", context, login)[0] == 403
        assert FakePrometheus.asked == []
        status, _, body = get(base + "/api/prometheus/query?query=sum%20by%20(group)%20(etl_runs_total)",
                              context, login)
        assert status == 200 and json.loads(body)["status"] == "success"
        assert get(base + "/api/prometheus/alerts", context, login)[0] == 200
        assert FakePrometheus.asked == [("/api/v1/query", {"query": ["sum by (group) (etl_runs_total)"]}),
                                        ("/api/v1/alerts", {})]
        with pytest.raises(urllib.error.URLError):
            get(base + "/", ssl.create_default_context(), login)  # a client that does not trust our CA
    finally:
        server.stop()


def test_basic_without_a_users_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="http.authentication.users.file"):
        AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": str(tmp_path),
                     "http.authentication.method": "BASIC"})
