"""The benchmark's figures per step, the keep-up verdict per tier, and their table (markdown and JSON) and plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from bench.capacity.keep_up import windows_complete

__all__ = ["ACHIEVED_SHARE", "TIER_CHECKS", "highest_kept_up", "keeps_up", "markdown", "plot", "write"]

#: Per tier: the lag it is judged by (a key of probes.LAG_QUERIES, or None) and the audit tiers whose windows
#: must be complete.
TIER_CHECKS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "emulators": (None, ("producer",)),
    "datacenter": (None, ("datacenter",)),
    "mirror": ("mirror", ("mirror", "offline")),
    "audit": ("audit", ()),
    "etl": ("etl", ("warehouse",)),
}
#: The emulators keep up when they sent at least this share of the rate asked for.
ACHIEVED_SHARE = 0.95


def _all(verdicts: Iterable[bool | None]) -> bool | None:
    verdicts = list(verdicts)
    if False in verdicts:
        return False
    return None if None in verdicts else True


def keeps_up(step: Mapping[str, Any], window_states: Sequence[Mapping[str, str]]) -> dict[str, bool | None]:
    """Per tier whether it kept up over ``step`` (its lag bounded, its windows complete; None: cannot tell)."""
    verdicts: dict[str, bool | None] = {}
    for tier, (lag, audit_tiers) in TIER_CHECKS.items():
        checks: list[bool | None] = []
        if lag is not None:
            checks.append(step["lag"].get(lag, {}).get("bounded"))
        if audit_tiers:
            checks.append(windows_complete(window_states, audit_tiers))
        if tier == "emulators":
            achieved = step.get("achieved_rate")
            checks.append(None if achieved is None else achieved >= ACHIEVED_SHARE * step["rate"])
        verdicts[tier] = _all(checks)
    return verdicts


def highest_kept_up(steps: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Per tier, the highest rate of a step it kept up with (None: none)."""
    return {tier: max((s["rate"] for s in steps if s["keeps_up"].get(tier) is True), default=None)
            for tier in TIER_CHECKS}


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _verdict(value: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "?"}[value]


def markdown(document: Mapping[str, Any]) -> str:
    """The report: the run's settings, a row per step (all kinds), CPU per kind, and the highest rates kept up."""
    steps = document["steps"]
    kinds = sorted({kind for s in steps for kind in s["cpu_cores"]}, key=lambda k: -max(
        s["cpu_cores"].get(k, 0.0) for s in steps))
    lines = [f"# Pipeline capacity, {document['date']}", "",
             f"Topology {document['topology']} ({document['settings']}); {document['step_seconds']} s per step "
             f"after {document['warmup_seconds']} s of warm-up; CPU from /proc for every process of supervisord's "
             "tree; lag from Prometheus; windows and latency from the audit.", "",
             "| events/s asked | sent | CPU cores | us/event | RSS GiB | mirror lag max | ETL lag max | audit lag max "
             "| offline p50/p99 s | warehouse p50/p99 s | ETL runs (longest s) | "
             + " | ".join(f"{t} keeps up" for t in TIER_CHECKS) + " |",
             "|" + "---|" * (11 + len(TIER_CHECKS))]
    for s in steps:
        lag, latency = s["lag"], s["latency"]
        cells = [_number(s["rate"]), _number(s["achieved_rate"]), f"{s['cpu_total']:.2f}",
                 _number(s["us_per_event_total"]), f"{s['rss_total'] / 2**30:.2f}",
                 *(_number(lag.get(t, {}).get("max")) for t in ("mirror", "etl", "audit")),
                 *(f"{_number(latency.get(t, {}).get('p50'), 1)}/{_number(latency.get(t, {}).get('p99'), 1)}"
                   for t in ("offline", "warehouse")),
                 f"{_number(s.get('etl_runs', {}).get('runs'))} ({_number(s.get('etl_runs', {}).get('longest_s'))})",
                 *(_verdict(s["keeps_up"].get(t)) for t in TIER_CHECKS)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "CPU per process kind: cores (us per event sent), RSS MiB.", "",
              "| events/s asked | " + " | ".join(kinds) + " |", "|" + "---|" * (1 + len(kinds))]
    for s in steps:
        cells = [f"{s['cpu_cores'].get(k, 0.0):.3f} ({_number(s['us_per_event'].get(k))}), "
                 f"{s['rss'].get(k, 0) / 2**20:.0f}" for k in kinds]
        lines.append(f"| {_number(s['rate'])} | " + " | ".join(cells) + " |")
    lines += ["", "Highest rate kept up with (lag bounded over the step, its windows complete): "
              + ", ".join(f"{tier} {_number(rate)}" for tier, rate in document["highest_kept_up"].items()), ""]
    return "\n".join(lines)


def plot(document: Mapping[str, Any], path: Path) -> None:
    """Rate against CPU cores per kind (left) and the largest lag per consumer tier (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = document["steps"]
    rates = [s["rate"] for s in steps]
    figure, (cpu, lag) = plt.subplots(1, 2, figsize=(13, 5))
    cpu.set_prop_cycle(color=plt.cm.tab20.colors)  # more kinds than the default cycle's ten colours
    for kind in sorted({k for s in steps for k in s["cpu_cores"]}):
        cpu.plot(rates, [s["cpu_cores"].get(kind, 0.0) for s in steps], marker="o", label=kind)
    cpu.plot(rates, [s["cpu_total"] for s in steps], marker="o", color="black", linewidth=2, label="all")
    cpu.set(xlabel="events/s asked (both datacenters)", ylabel="CPU cores", title="CPU per process kind")
    cpu.legend(fontsize=7)
    for tier in sorted({t for s in steps for t in s["lag"]}):
        lag.plot(rates, [s["lag"][tier].get("max") or 0 for s in steps], marker="o", label=tier)
    lag.set(xlabel="events/s asked (both datacenters)", ylabel="largest lag over the step (records)",
            title="Lag per tier")
    lag.set_yscale("symlog")
    lag.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write(document: Mapping[str, Any], directory: Path) -> list[Path]:
    """capacity.json, capacity.md and capacity.png in ``directory``; the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "capacity.json", directory / "capacity.md", directory / "capacity.png"]
    paths[0].write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    paths[1].write_text(markdown(document))
    plot(document, paths[2])
    return paths
