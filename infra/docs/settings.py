"""Every service's settings table, as the services declare it (rows of :class:`pipeline.config.Property`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from audit.config import AUDIT_PROPERTIES
from broker.config import PROPERTIES as BROKER_PROPERTIES
from etl.config import ETL_PROPERTIES
from infra.docs.markdown import code, table
from mirror.config import MIRROR_PROPERTIES
from pipeline.client.consumer_config import CONSUMER_CONFIG, CONSUMER_CONNECTOR_CONFIG, STATIC_CONNECTOR_CONFIG
from pipeline.client.producer_config import PRODUCER_PROPERTIES
from pipeline.config import Property
from producers.config import EMULATOR_PROPERTIES
from schemas.registry.config import REGISTRY_PROPERTIES

__all__ = ["SETTINGS", "SettingsTable", "render_settings"]


@dataclass(frozen=True)
class SettingsTable:
    """One table of settings: whose it is, where it is declared, and its rows."""

    title: str
    declared_in: str
    reader: str
    rows: Sequence[Property]
    # a table these rows extend: only the rows it lacks are listed, and what it has that these lack is named
    base: "SettingsTable | None" = None


_CONSUMER = SettingsTable("SimpleConsumer and Consumer", "pipeline/client/consumer_config.py",
                          "`pipeline.client.SimpleConsumer`, `pipeline.client.Consumer`", CONSUMER_CONFIG)

SETTINGS: tuple[SettingsTable, ...] = (
    SettingsTable("Broker", "broker/config.py", "`python -m broker`", BROKER_PROPERTIES),
    SettingsTable("Schema registry", "schemas/registry/config.py", "`python -m schemas.registry`", REGISTRY_PROPERTIES),
    SettingsTable("Frontend emulators", "producers/config.py", "`python -m producers`", EMULATOR_PROPERTIES),
    SettingsTable("Mirror", "mirror/config.py", "`python -m mirror`", MIRROR_PROPERTIES),
    SettingsTable("ETL", "etl/config.py", "`python -m etl`", ETL_PROPERTIES),
    SettingsTable("Audit", "audit/config.py", "`python -m audit`", AUDIT_PROPERTIES),
    SettingsTable("Producer client", "pipeline/client/producer_config.py", "`pipeline.client.Producer`",
                  PRODUCER_PROPERTIES),
    _CONSUMER,
    SettingsTable("StaticConsumerConnector (every partition of a broker list, no group)",
                  "pipeline/client/consumer_config.py", "`pipeline.client.static_connector.StaticConsumerConnector`",
                  STATIC_CONNECTOR_CONFIG, base=_CONSUMER),
    SettingsTable("ConsumerConnector", "pipeline/client/consumer_config.py", "`pipeline.client.ConsumerConnector`",
                  CONSUMER_CONNECTOR_CONFIG, base=_CONSUMER),
)


def _bounds(row: Property) -> str:
    if row.at_least is None and row.at_most is None:
        return ""
    low = "" if row.at_least is None else str(row.at_least)
    high = "" if row.at_most is None else str(row.at_most)
    return f"{low}..{high}"


def _meaning(row: Property) -> str:
    if not row.aliases:
        return row.doc
    names = ", ".join(f"`{alias}`" for alias in row.aliases)
    return f"{row.doc} Also spelt {names}." if row.doc.endswith(".") else f"{row.doc} (also spelt {names})"


def render_settings(settings: Sequence[SettingsTable] = SETTINGS) -> str:
    """One section per table: every setting with its default, its accepted range and what it does."""
    sections = []
    for entry in settings:
        rows, text = list(entry.rows), f"Read by {entry.reader}; declared in `{entry.declared_in}`."
        if entry.base is not None:
            inherited = [row for row in entry.base.rows if row in rows]
            lacking = [row.name for row in entry.base.rows if row.name not in {r.name for r in rows}]
            rows = [row for row in rows if row not in inherited]
            text += f" It also takes every setting of {entry.base.title} above"
            text += f" except {', '.join(f'`{name}`' for name in lacking)}." if lacking else "."
        cells = [(f"`{row.name}`", code(row.default), _bounds(row), _meaning(row)) for row in rows]
        sections.append(f"### {entry.title}\n\n{text}\n\n" + table(("setting", "default", "range", "meaning"), cells))
    return "\n\n".join(sections)
