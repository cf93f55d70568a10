"""docs/operations.md is what the code renders now, and names what it must."""

from __future__ import annotations

from infra.docs.operations import OPERATIONS_DOC, render_operations


def test_operations_doc_is_current() -> None:
    written = OPERATIONS_DOC.read_text() if OPERATIONS_DOC.is_file() else ""
    assert written == render_operations(), "docs/operations.md is stale: run make docs"


def test_page_names_settings_metrics_processes_and_alerts() -> None:
    page = render_operations()
    for expected in ("`log.segment.bytes`", "`warehouse.dir`", "`source.clusters`", "`grace.ms`",
                     "`kafka_server_brokertopicmetrics_messages_in_total`", "`mirror_records_total`",
                     "`etl_runs_total`", "`audit_events_lost_total`", "`schema_registry_requests_total`",
                     "`emulator_events_sent_total`", "| 9092 | broker 1 of dc1 |", "`broker-offline-3`",
                     "`AuditEventsLost`"):
        assert expected in page
