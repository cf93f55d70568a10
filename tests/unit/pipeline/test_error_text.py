"""Log lines and error answers name the exception's type: ZooKeeper's ConnectionLoss and asyncio's TimeoutError carry
no message, and ``exc or type(exc).__name__`` printed "controller event brokers failed (); retrying in 0.1s" (issue
26); the controller, the ISR writer, the log cleaner, the command-line tools and the audit's Prometheus proxy and
progress lines each once printed nothing there."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import urllib.request
from types import SimpleNamespace

from kazoo.exceptions import ConnectionLoss

import audit.http_api
from audit.config import AuditConfig
from audit.http_api import AuditHttpServer
from audit.service import AuditService
from broker.cluster.controller import KafkaController
from broker.cluster.isr_writer import IsrChangeWriter
from pipeline.cli.common import EXIT_UNREACHABLE, run_guarded
from pipeline.error_text import describe_error


def test_an_exception_without_a_message_is_named_by_its_type():
    assert describe_error(ConnectionLoss()) == "ConnectionLoss"
    assert describe_error(asyncio.TimeoutError()) == "TimeoutError"
    assert describe_error(OSError(28, "No space left on device")) == "OSError: [Errno 28] No space left on device"


def test_the_controller_says_which_error_made_an_event_retry(caplog):
    controller = KafkaController.__new__(KafkaController)
    controller._failures = {}
    controller._retry_timers = {"brokers": None}  # a retry already scheduled: no timer thread
    with caplog.at_level(logging.WARNING, logger="broker.cluster.controller"):
        controller._retry("brokers", ConnectionLoss())
    assert caplog.messages == ["controller event brokers failed (ConnectionLoss); retrying in 0.1s"]


def test_the_audit_names_a_prometheus_that_timed_out(tmp_path, monkeypatch):
    # A Prometheus that takes the connection and never answers: aiohttp's timeout is a TimeoutError without text.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        config = AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": str(tmp_path),
                              "prometheus.url": f"http://127.0.0.1:{silent.getsockname()[1]}"})
        monkeypatch.setattr(audit.http_api, "PROMETHEUS_TIMEOUT_S", 0.2)
        server = AuditHttpServer(AuditService(config), "127.0.0.1", 0).start()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/api/prometheus/query?query=etl_consecutive_failures",
                                        timeout=10) as answer:
                body = json.load(answer)
        finally:
            server.stop()
    assert body["status"] == "error"
    assert body["error"].endswith(": TimeoutError"), body


def test_a_command_line_tool_names_a_lost_zookeeper_connection(capsys):
    def command(args: argparse.Namespace) -> int:
        raise ConnectionLoss()

    assert run_guarded(command, argparse.Namespace(), "pipeline") == EXIT_UNREACHABLE
    assert capsys.readouterr().err == "pipeline: error: ZooKeeper did not answer (ConnectionLoss)\n"


def test_the_isr_writer_says_why_the_controller_was_not_notified(caplog):
    class Zk:
        """Stores the ISR, then loses the connection before the notification is written."""

        def sync(self, operation: str, *args: object, **kwargs: object) -> SimpleNamespace:
            if operation == "create":
                raise ConnectionLoss()
            return SimpleNamespace(version=4)

    writer = IsrChangeWriter(Zk(), 1, None, None)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="broker.cluster.isr_writer"):
        assert writer._write("/brokers/topics/t/partitions/0/state", b"{}", 3, b"{}") == 4
    assert caplog.messages == ["could not notify the controller of the ISR change at "
                               "/brokers/topics/t/partitions/0/state: ConnectionLoss"]


def test_the_audit_says_why_a_clusters_progress_is_not_known(tmp_path, monkeypatch, caplog):
    service = AuditService(AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": str(tmp_path)}))

    def observe(name: str, cluster: object) -> set:
        raise ConnectionLoss()

    monkeypatch.setattr(service, "_clusters", {"dc1": None})
    monkeypatch.setattr(service, "_observe", observe)
    with caplog.at_level(logging.DEBUG, logger="audit.service"):
        service.observe_progress()
    assert "progress of dc1 not known now: ConnectionLoss" in caplog.messages
