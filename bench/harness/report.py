"""Writes a run's results.json, report.md and PNG plots (matplotlib) into one dated directory.

The report sets the paper's published figures beside ours as reference rows and gives each peer's
ratio to our broker measured in the same run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# The 2011 paper's section 5 (one producer / one consumer, 200-byte messages, 10 million messages).
PAPER_PRODUCE = [("Kafka, batch 1", "50,000"), ("Kafka, batch 50", "400,000"),
                 ("ActiveMQ", "orders of magnitude below Kafka"), ("RabbitMQ", "at most half of Kafka")]
PAPER_CONSUME = [("Kafka", "~22,000"), ("ActiveMQ, RabbitMQ", "less than a quarter of Kafka")]
PAPER_STORAGE = [("Kafka", "9 bytes overhead per message"), ("ActiveMQ", "144 bytes overhead per message")]
PEERS = ("rabbitmq", "activemq", "nats-jetstream")


def _find(results: list[dict[str, Any]], system: str, test: str, batch: int | None = None,
          acks: int | None = None) -> dict[str, Any] | None:
    for row in results:
        if row["system"] == system and row["test"] == test and (batch is None or row["batch"] == batch) \
                and (acks is None or row["acks"] == acks):
            return row
    return None


def _ratio(value: float, reference: dict[str, Any] | None) -> str:
    if reference is None or not reference["msgs_per_s"]:
        return "-"
    return f"{value / reference['msgs_per_s']:.3f}"


def _fmt(value: float) -> str:
    return f"{value:,.0f}"


def plots(document: dict[str, Any], out: Path) -> list[str]:
    """The PNG files: produce throughput over the run, produce/consume bars, storage; names returned."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    figure, axes = plt.subplots(figsize=(9, 5.5))
    courses = [(label, series) for label, series in document["courses"].items() if series]
    # tab20 gives every series its own colour (tab10 repeats after ten); peers get a marker of their own.
    palette = plt.get_cmap("tab20")
    for number, (label, series) in enumerate(courses):
        ours = label.startswith("ours")
        axes.plot([p["mb_sent"] for p in series], [p["msgs_per_s"] for p in series], label=label,
                  color=palette(number % 20), marker="." if ours else "s", markersize=4 if ours else 3,
                  linestyle="-" if ours and "acks=0" in label else "--")
    axes.set_yscale("log")
    axes.set_xlabel("MB sent")
    axes.set_ylabel("messages/s (log scale)")
    axes.set_title("Producer throughput over the run (cf. the paper's Figure 4)")
    axes.legend(fontsize=7, ncol=2)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(out / "produce_course.png", dpi=110)
    plt.close(figure)
    names.append("produce_course.png")

    results = document["results"]
    for test, title, filename in (("produce", "Producer throughput (cf. Figure 4)", "produce.png"),
                                  ("consume", "Consumer throughput (cf. Figure 5)", "consume.png")):
        rows = [r for r in results if r["test"] == test]
        if not rows:
            continue
        figure, axes = plt.subplots(figsize=(9, 4.5))
        labels = [f"{r['system']}\nb={r['batch']} a={r['acks']}" if r["system"] == "ours" and test == "produce"
                  else r["system"] for r in rows]
        axes.bar(range(len(rows)), [r["msgs_per_s"] for r in rows],
                 color=["tab:blue" if r["system"] == "ours" else "tab:orange" for r in rows])
        axes.set_xticks(range(len(rows)), labels, fontsize=7)
        axes.set_yscale("log")
        axes.set_ylabel("messages/s (log scale)")
        axes.set_title(title)
        figure.tight_layout()
        figure.savefig(out / filename, dpi=110)
        plt.close(figure)
        names.append(filename)

    storage = [r for r in results if r["test"] == "produce" and (r["system"] != "ours" or r["acks"] == 0)]
    if storage:
        figure, axes = plt.subplots(figsize=(9, 4.5))
        axes.bar(range(len(storage)), [r["disk_bytes_per_msg"] for r in storage],
                 color=["tab:blue" if r["system"] == "ours" else "tab:orange" for r in storage])
        axes.set_xticks(range(len(storage)), [f"{r['system']}\nb={r['batch']}" for r in storage], fontsize=7)
        axes.axhline(document["settings"]["message_size"], color="grey", linestyle=":", label="payload")
        axes.set_ylabel("bytes on disk per 200-byte message")
        axes.set_title("Storage")
        axes.legend()
        figure.tight_layout()
        figure.savefig(out / "storage.png", dpi=110)
        plt.close(figure)
        names.append("storage.png")
    return names


def markdown(document: dict[str, Any], images: list[str]) -> str:
    """report.md: tables of every figure, the paper's reference rows and the peers' ratios to ours."""
    results = document["results"]
    size = document["settings"]["message_size"]
    lines = [f"# Benchmark report {document['date']}", "",
             f"Machine: {document['machine']}", "",
             f"{document['settings']['messages']:,} messages of {size} bytes per test, one producer / one consumer, "
             "broker and clients on the same machine, every system measured in this one run "
             "(ratios are only meaningful within a run). Generated by `make bench` (python -m bench.run).", ""]
    if document.get("errors"):
        lines += ["**Systems that could not be measured:**", ""]
        lines += [f"- {name}: {error}" for name, error in document["errors"].items()] + [""]

    ours_b1 = _find(results, "ours", "produce", 1, 0)
    ours_b50 = _find(results, "ours", "produce", 50, 0)
    lines += ["## Producer (the paper's Figure 4)", "",
              "| system | batch | acks | msg/s | MB/s | ratio to ours b=1 acks=0 | ratio to ours b=50 acks=0 | broker CPU s / M msgs "
              "| broker RSS peak MB |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in (r for r in results if r["test"] == "produce"):
        lines.append(f"| {row['system']} | {row['batch']} | {row['acks']} | {_fmt(row['msgs_per_s'])} | "
                     f"{row['mb_per_s']:.1f} | {_ratio(row['msgs_per_s'], ours_b1)} | "
                     f"{_ratio(row['msgs_per_s'], ours_b50)} | {row['broker_cpu_s_per_million']} | "
                     f"{row['broker_rss_peak_mb']} |")
    lines += ["", "Paper's published producer figures (reference rows, their 2011 hardware):", "",
              "| paper | msg/s |", "|---|---|"]
    lines += [f"| {who} | {figure} |" for who, figure in PAPER_PRODUCE]

    ours_consume = _find(results, "ours", "consume")
    lines += ["", "## Consumer (the paper's Figure 5)", "",
              "| system | read from | msg/s | MB/s | ratio to ours | broker CPU s / M msgs | broker RSS peak MB |",
              "|---|---|---|---|---|---|---|"]
    for row in (r for r in results if r["test"] == "consume"):
        lines.append(f"| {row['system']} | {row.get('consumed_from', '')} | {_fmt(row['msgs_per_s'])} | "
                     f"{row['mb_per_s']:.1f} | {_ratio(row['msgs_per_s'], ours_consume)} | "
                     f"{row['broker_cpu_s_per_million']} | {row['broker_rss_peak_mb']} |")
    lines += ["", "| paper | msg/s |", "|---|---|"] + [f"| {who} | {figure} |" for who, figure in PAPER_CONSUME]

    lines += ["", "## Storage", "", "| system | batch | bytes on disk / message | overhead over the payload |",
              "|---|---|---|---|"]
    for row in (r for r in results if r["test"] == "produce" and (r["system"] != "ours" or r["acks"] == 0)):
        lines.append(f"| {row['system']} | {row['batch']} | {row['disk_bytes_per_msg']} | "
                     f"{row['disk_bytes_per_msg'] - size:.1f} |")
    lines += ["", "| paper | overhead |", "|---|---|"] + [f"| {who} | {figure} |" for who, figure in PAPER_STORAGE]
    lines += ["", "Bytes on disk = growth of the allocated blocks of the system's data directory during the "
              "producer test (after its asynchronous flushes settled), divided by the messages."]

    if document.get("latency"):
        lines += ["", "## Produce-to-consume latency", "",
                  "| system | rate msg/s | p50 ms | p99 ms | p99.9 ms | max ms | samples |", "|---|---|---|---|---|---|---|"]
        for name, lat in document["latency"].items():
            lines.append(f"| {name} | {lat['rate']} | {lat['p50_ms']} | {lat['p99_ms']} | {lat['p99_9_ms']} | "
                         f"{lat['max_ms']} | {lat['samples']} |")

    broker_only = document.get("broker_only")
    if broker_only:
        lines += ["", "## Our broker alone (no client encoding or decoding)", "",
                  "| test | batch | msg/s | MB/s | broker CPU s / M msgs | broker RSS peak MB |", "|---|---|---|---|---|---|"]
        for row in broker_only["produce"]:
            lines.append(f"| produce pre-encoded batches, acks=1, 8 in flight | {row['batch']} | "
                         f"{_fmt(row['msgs_per_s'])} | {row['mb_per_s']} | {row['broker_cpu_s_per_million']} | "
                         f"{row['broker_rss_peak_mb']} |")
        for path, row in broker_only["fetch"].items():
            lines.append(f"| fetch, 1 MiB per request, {path.replace('_', ' ')} | 50 | {_fmt(row['msgs_per_s'])} | "
                         f"{row['mb_per_s']} | {row['broker_cpu_s_per_million']} | {row['broker_rss_peak_mb']} |")

    lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in images]
    lines += ["", "## Setup", "",
              "- ours: `python -m broker`, page-cache flushing; producer acks=0 = sync producer with B messages per "
              "send(), acks=1 = async producer with batch.size B; consumer: SimpleConsumer, 200 KB fetches.",
              "- RabbitMQ: durable queue, persistent messages, no publisher confirms (pika); consumer auto-ack.",
              "- ActiveMQ: persistent messages over STOMP without receipts (stomp.py), KahaDB journal synced "
              "periodically; consumer ack=auto, prefetch 1,000.",
              "- NATS JetStream: file stream, publish_async with up to 4,000 pending acks (nats-py); "
              "pull consumer with ack policy none, 1,000 messages per fetch.",
              "- Broker CPU and RSS: the broker's process tree read from /proc during each test.",
              "- Latency: one process publishes stamped messages at the fixed rate while a second connection "
              "consumes; latency = receive time - stamp (same monotonic clock).", ""]
    return "\n".join(lines)


def rerender(out: Path) -> None:
    """Write report.md and the plots again from the results.json already in ``out``."""
    document = json.loads((out / "results.json").read_text())
    images = plots(document, out)
    (out / "report.md").write_text(markdown(document, images))


def write(document: dict[str, Any], out: Path) -> None:
    """results.json, the PNG plots and report.md into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(document, indent=1) + "\n")
    images = plots(document, out)
    (out / "report.md").write_text(markdown(document, images))
