"""`python -m etl quarantine list|show|replay`: what the runs set aside, one record in full, and loading what now
decodes.

    python -m etl quarantine list --warehouse DIR [--topic T] [--run RUN] [--reason TEXT] [--limit N] [--json]
    python -m etl quarantine show --warehouse DIR [--registry URL] TOPIC PARTITION OFFSET
    python -m etl quarantine replay --zookeeper zk:2181/offline --warehouse DIR [--topic T ...] [--run RUN]

``list`` and ``show`` read the quarantine's live files (the warehouse's snapshot) without any lock; ``replay``
takes the group's lock like a run (etl.replay). Exit codes: 0 done, 1 the replay failed or the record is not in
the quarantine, 2 wrong settings.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any, TextIO

from etl.config import ETL_PROPERTIES
from etl.quarantine import REASONS, quarantine_table
from etl.store import Warehouse
from pipeline.config import ConfigError, command_line_values

__all__ = ["add_quarantine_parser"]

PROG = "python -m etl quarantine"
_LIST_COLUMNS = ("run id", "record", "timestamp", "source", "reason", "event id")


def add_quarantine_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``quarantine`` and its three subcommands."""
    from etl.commands import add_settings_options

    parser = subparsers.add_parser(
        "quarantine", help="records set aside because they could not be loaded",
        description="Records a run could not load (no value, not in the Confluent wire format, an unknown schema "
                    "id, a value that does not decode) are kept in the warehouse's quarantine with their lineage, "
                    "bytes and error. List them, show one, or load those that decode now that the schema or the "
                    "code is fixed.")
    commands = parser.add_subparsers(dest="quarantine_command", metavar="COMMAND", required=True)

    listing = commands.add_parser("list", help="the quarantined records, one line each",
                                  description="The quarantined records of the warehouse, oldest run first.")
    _warehouse_options(listing)
    listing.add_argument("--topic", help="only this topic")
    listing.add_argument("--run", metavar="RUN", help="only records set aside by this run")
    listing.add_argument("--reason", choices=REASONS, help="only records set aside for this reason")
    listing.add_argument("--limit", type=int, default=100, metavar="N", help="show at most N records (default 100)")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    listing.set_defaults(command=list_main)

    show = commands.add_parser("show", help="one quarantined record in full, its value decoded where possible",
                               description="One quarantined record: its lineage, run, reason and error, key, "
                                           "headers, and its value's bytes, decoded with its writer schema when the "
                                           "registry knows it.")
    _warehouse_options(show)
    show.add_argument("--registry", metavar="URL", help="schema registry to decode the value with")
    show.add_argument("topic", metavar="TOPIC")
    show.add_argument("partition", metavar="PARTITION", type=int)
    show.add_argument("offset", metavar="OFFSET", type=int)
    show.set_defaults(command=show_main)

    replay = commands.add_parser(
        "replay", help="load the quarantined records that now decode",
        description="Load the quarantined records that decode with today's schemas into their tables, exactly "
                    "once, taking them out of the quarantine in the same commit; the others stay. Runs under the "
                    "ETL group's lock and publishes the warehouse tier's audit counts of what it loaded.")
    add_settings_options(replay)
    replay.add_argument("--topic", action="append", metavar="TOPIC", help="only this topic (repeatable)")
    replay.add_argument("--run", metavar="RUN", help="only records set aside by this run")
    replay.set_defaults(command=replay_main)
    return parser


def _warehouse_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="properties file to read warehouse.dir and group.id from")
    parser.add_argument("--warehouse", metavar="DIR", help="the warehouse directory")
    parser.add_argument("--group", help="the ETL group (default etl)")


def _warehouse(args: argparse.Namespace, command: str, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """warehouse.dir, group.id (and ``extra`` settings) of a list or show command line; None after a usage error."""
    defaults = {p.name: p.default for p in ETL_PROPERTIES}
    try:
        values = command_line_values(args.config, [], {"warehouse.dir": args.warehouse, "group.id": args.group,
                                                       **(extra or {})})
    except (ConfigError, OSError) as error:
        print(f"{PROG} {command}: error: {error}", file=sys.stderr)
        return None
    if not values.get("warehouse.dir"):
        print(f"{PROG} {command}: error: give the warehouse directory (--warehouse DIR)", file=sys.stderr)
        return None
    return {**defaults, **values}


def _records(warehouse: Warehouse, topic: str | None = None) -> list[dict[str, Any]]:
    files = warehouse.snapshot().quarantine_files()
    paths = [warehouse.root / path for name, found in sorted(files.items()) if topic is None or name == topic
             for path in found]
    return quarantine_table(paths).to_pylist()


def list_main(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Print the quarantined records a parsed ``quarantine list`` asks for."""
    out = out or sys.stdout
    settings = _warehouse(args, "list")
    if settings is None:
        return 2
    if args.limit < 1:
        print(f"{PROG} list: error: --limit must be at least 1", file=sys.stderr)
        return 2
    records = [r for r in _records(Warehouse(settings["warehouse.dir"], settings["group.id"]), args.topic)
               if (args.run is None or r["run_id"] == args.run) and (args.reason is None or r["reason"] == args.reason)]
    records.sort(key=lambda r: (r["run_id"], r["kafka_topic"], r["kafka_partition"], r["kafka_offset"]))
    shown = records[:args.limit]
    if args.json:
        json.dump([_json_record(r) for r in shown], out, indent=1, sort_keys=True)
        out.write("\n")
        return 0
    if not records:
        print(f"nothing is quarantined under {settings['warehouse.dir']}", file=sys.stderr)
        return 0
    rows = [(r["run_id"], f"{r['kafka_topic']}-{r['kafka_partition']}@{r['kafka_offset']}",
             _time(r["kafka_timestamp"]), _source(r), r["reason"], r["event_id"] or "") for r in shown]
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(_LIST_COLUMNS)]
    for row in [_LIST_COLUMNS, *rows]:
        out.write("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() + "\n")
    if len(records) > len(shown):
        out.write(f"... {len(records) - len(shown)} more (--limit)\n")
    return 0


def show_main(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Print one quarantined record in full (``quarantine show``)."""
    out = out or sys.stdout
    settings = _warehouse(args, "show", {"schema.registry.url": args.registry})
    if settings is None:
        return 2
    found = [r for r in _records(Warehouse(settings["warehouse.dir"], settings["group.id"]), args.topic)
             if r["kafka_partition"] == args.partition and r["kafka_offset"] == args.offset]
    if not found:
        print(f"{PROG} show: error: {args.topic}-{args.partition}@{args.offset} is not in the quarantine",
              file=sys.stderr)
        return 1
    record = found[0]
    value = record["value"]
    lines = [("record", f"{record['kafka_topic']}-{record['kafka_partition']}@{record['kafka_offset']}"),
             ("run", record["run_id"]), ("reason", record["reason"]), ("error", record["error"]),
             ("timestamp", _time(record["kafka_timestamp"])), ("source", _source(record) or "(not mirrored)"),
             ("event", _event(record)),
             ("schema id", "(none read)" if record["schema_id"] is None else str(record["schema_id"])),
             ("key", _bytes(record["key"])),
             ("headers", ", ".join(f"{h['key']}={_text(h['value'])}" for h in record["headers"] or ()) or "(none)"),
             ("value", _bytes(value)), ("decoded", _decoded(value, settings))]
    width = max(len(name) for name, _ in lines)
    for name, text in lines:
        out.write(f"{name.ljust(width)}  {text}\n")
    return 0


def replay_main(args: argparse.Namespace) -> int:
    """Replay what a parsed ``quarantine replay`` asks for under the group's lock; 0 done, 1 failed, 2 settings."""
    from etl.commands import load_config
    from etl.config import ETL_PROPERTIES
    from pipeline.service import Service, run_threaded

    return run_threaded(Service(f"{PROG} replay", ETL_PROPERTIES, load_config, ()), args,
                        lambda config, stop: _replay(args, config, stop))


def _replay(args: argparse.Namespace, config: Any, stop: Any) -> int:
    from etl.commands import run_under_lock
    from etl.replay import replay_quarantine

    def job(settings: Any, *, still_locked: Any) -> Any:
        return replay_quarantine(settings, topics=set(args.topic) if args.topic else None, run=args.run,
                                 still_locked=still_locked)

    report, code = run_under_lock(config, job, f"{PROG} replay", stop)
    if report is None:
        return code or 0
    for topic in sorted(set(report.loaded) | set(report.still_quarantined)):
        print(f"{topic}: {report.loaded.get(topic, 0)} records loaded, {report.still_quarantined.get(topic, 0)} "
              f"still quarantined")
    print(f"replay {report.run_id}: {report.rows} records loaded")
    for topic, error in sorted(report.topic_errors.items()):
        print(f"{PROG} replay: error: topic {topic} not replayed: {error}", file=sys.stderr)
    return 1 if report.topic_errors else 0


def _json_record(record: dict[str, Any]) -> dict[str, Any]:
    found = dict(record)
    for name in ("kafka_timestamp", "event_time"):
        if found[name] is not None:
            found[name] = _time(found[name])
    found["key"] = None if record["key"] is None else record["key"].hex()
    found["value"] = None if record["value"] is None else record["value"].hex()
    found["headers"] = [{"key": h["key"], "value": None if h["value"] is None else h["value"].hex()}
                        for h in record["headers"] or ()]
    return found


def _time(moment: datetime.datetime | None) -> str:
    if moment is None:
        return ""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _source(record: dict[str, Any]) -> str:
    if record["source_cluster"] is None:
        return ""
    return f"{record['source_cluster']} {record['kafka_topic']}-{record['source_partition']}@{record['source_offset']}"


def _event(record: dict[str, Any]) -> str:
    if record["event_id"] is None:
        return "(no EventHeader)"
    return f"{record['event_id']} at {_time(record['event_time'])} in {record['datacenter'] or '?'}"


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex()
    return repr(text) if text.isprintable() else data.hex()


def _bytes(data: bytes | None) -> str:
    if data is None:
        return "null"
    shown = data[:64].hex(" ")
    more = f" ... ({len(data) - 64} more)" if len(data) > 64 else ""
    readable = ""
    try:
        text = data.decode("utf-8")
        if text.isprintable():
            readable = f"  text {text!r}"
    except UnicodeDecodeError:
        pass
    return f"{len(data)} bytes: {shown}{more}{readable}"


def _decoded(value: bytes | None, settings: dict[str, Any]) -> str:
    """The value decoded with its writer schema, or why it cannot be."""
    if value is None:
        return "(no value)"
    import io

    import fastavro

    from schemas.registry_client import SchemaRegistryClient, SchemaRegistryError
    from schemas.serde import WireFormatError, schema_id_of

    try:
        schema_id = schema_id_of(value)
    except WireFormatError as error:
        return f"(not in the Confluent wire format: {error})"
    try:
        with SchemaRegistryClient.from_config(settings) as registry:
            writer = registry.schema(schema_id).parsed
    except SchemaRegistryError as error:
        return f"(the writer schema {schema_id} could not be read: {error})"
    stream = io.BytesIO(value)
    stream.seek(5)
    try:
        record = fastavro.schemaless_reader(stream, writer, None)
    except Exception as error:  # noqa: BLE001 - whatever fastavro raises for these bytes is the answer
        return f"(does not decode with its writer schema {schema_id}: {type(error).__name__}: {error})"
    return json.dumps(record, default=str, sort_keys=True)
