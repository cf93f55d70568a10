"""The status document of :func:`infra.deployment.status.gather` as text: a table of the processes, then one
block per key figure (a source that did not answer says so on its line)."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

__all__ = ["render"]

LABEL_WIDTH = 14
MAX_NAMED = 5


def render(document: Mapping[str, Any]) -> str:
    """The whole status as text."""
    if document["supervisord"] is None:
        return (f"supervisord is not running for {document['var_dir']}: the deployment is down "
                f"(`make pipeline-up` starts it)")
    now = document["time"]
    lines = [f"supervisord pid {document['supervisord']['pid']}  ({document['supervisord']['config']})", ""]
    lines += _processes(document["processes"])
    lines.append("")
    for name, label, show in _FIGURES:
        figure = document["figures"].get(name, {"error": "not gathered"})
        if "error" in figure:
            body = [f"not known: {figure['error']}"]
        else:
            body = show(figure["value"], now)
        lines.append(f"{label:<{LABEL_WIDTH}}{body[0]}")
        lines += [" " * LABEL_WIDTH + line for line in body[1:]]
    return "\n".join(line.rstrip() for line in lines)


def _processes(rows: list[Mapping[str, Any]]) -> list[str]:
    table = [("PROCESS", "STATE", "PID", "UPTIME", "HEALTH", "")]
    for row in rows:
        if row["healthy"] is None:
            health, detail = "-", row["description"]
        else:
            health, detail = ("ok" if row["healthy"] else "FAILING"), row["health"]
        table.append((row["name"], row["state"], str(row["pid"] or "-"), duration(row["uptime_s"]), health, detail))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    return ["  ".join([*(cell.ljust(width) for cell, width in zip(line, widths)), line[-1]]) for line in table]


def duration(seconds: float | None) -> str:
    """``1d 02:03:04``, ``2:03:04``, ``0:00:05``; ``-`` for None."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    days, rest = divmod(whole, 86_400)
    text = f"{rest // 3600}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}d {text}" if days else text


def clock(epoch_s: float, now: float) -> str:
    """A UTC time and how long ago it was."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch_s)) + f" ({duration(max(0.0, now - epoch_s))} ago)"


def _per_name(values: Mapping[str, float | None], show: Callable[[float], str]) -> str:
    if not values:
        return "nothing to show"
    return "   ".join(f"{name} {'no data' if value is None else show(value)}" for name, value in values.items())


def _events(values: Mapping[str, float | None], now: float) -> list[str]:
    return [_per_name(values, lambda rate: f"{rate:.1f}")]


def _lag(values: Mapping[str, float | None], now: float) -> list[str]:
    return [_per_name(values, lambda lag: f"{int(lag)} records") + "   (records the mirror's group has yet to commit)"]


def _etl(run: Mapping[str, Any] | None, now: float) -> list[str]:
    if run is None:
        return ["no run recorded yet"]
    duration_s = "" if run["duration_s"] is None else f" in {run['duration_s']:.1f}s"
    lines = [f"{clock(run['started_at'], now)}: {run['outcome']}, {run['rows']} rows{duration_s} (run {run['run_id']})"]
    if run["error"]:
        lines.append(f"error: {run['error']}")
    if run["outcome"] != "succeeded":
        lines.append("last success: " + ("none" if run["last_success_at"] is None
                                         else clock(run["last_success_at"], now)))
    return lines


def _audit(audit: Mapping[str, Any], now: float) -> list[str]:
    if not audit["recent"]:
        return [f"no window reconciled yet (threshold {audit['threshold']:.3f})"]
    lines = [f"completeness of the newest windows (worst topic and datacenter; threshold {audit['threshold']:.3f}):"]
    for window in audit["recent"]:
        start = time.strftime("%H:%M:%S", time.gmtime(window["window_start"] / 1000))
        end = time.strftime("%H:%M:%S", time.gmtime(window["window_end"] / 1000))
        shown = {tier: f"{ratio:.3f}" for tier, ratio in window["completeness"].items()}
        for tier in window["pending"]:
            shown[tier] = "pending"
        tiers = "  ".join(f"{tier} {text}" for tier, text in shown.items())
        lines.append(f"  {start}-{end}  {tiers}")
    lines.append(f"incomplete windows: {audit['incomplete']} of {audit['windows']} reconciled; {audit['pending']} "
                 f"pending, {audit['unaccounted']} unaccounted for; {audit['named_windows']} name lost, duplicated, "
                 f"unexpected or quarantined events")
    for tier, pending in audit["pending_tiers"].items():
        lag = "" if pending["lag_records"] is None else f", {pending['lag_records']} records behind"
        oldest = time.strftime("%H:%M:%S", time.gmtime(pending["oldest"] / 1000))
        lines.append(f"  pending at {tier}: {pending['windows']} window(s) since {oldest}{lag} (lag, not loss)")
    for named in audit["named"][-MAX_NAMED:]:
        start = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(named["window_start"] / 1000))
        what = [f"{named['lost']} lost"] if named["lost"] else []
        what += [f"{named['duplicated']} duplicated"] if named["duplicated"] else []
        what += [f"{named['unexpected']} unexpected (created by no audited producer)"] if named.get("unexpected") else []
        what += [f"{n} quarantined ({reason})" for reason, n in named["quarantined"].items()]
        if not named["decoded"]:
            what.append("too many to name")
        lines.append(f"  {named['topic']} {named['datacenter']} {start} at {named['tier']}: {', '.join(what)}")
    return lines


def _alerts(alerts: Mapping[str, Any], now: float) -> list[str]:
    pending = f" ({alerts['pending']} pending)" if alerts["pending"] else ""
    if not alerts["firing"]:
        return [f"none firing{pending}"]
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for alert in alerts["firing"]:
        by_name.setdefault(alert["name"], []).append(alert)
    lines = [f"{len(alerts['firing'])} firing{pending}:"]
    for name, series in by_name.items():
        first = series[0]
        labels = ",".join(f"{k}={v}" for k, v in first["labels"].items())
        more = f" (and {len(series) - 1} more)" if len(series) > 1 else ""
        summary = f": {first['summary']}" if first["summary"] else ""
        lines.append(f"  {name} ({first['severity'] or 'no severity'}) {labels}{summary}{more}")
    return lines


_FIGURES: tuple[tuple[str, str, Callable[[Any, float], list[str]]], ...] = (
    ("events_per_second", "events/s", _events),
    ("mirror_lag", "mirror lag", _lag),
    ("etl", "last ETL run", _etl),
    ("audit", "audit", _audit),
    ("alerts", "alerts", _alerts),
)
