"""Runs the whole benchmark: every system, one after the other, in one run on this machine.

For each system: start it on free loopback ports with its data under the run's temp dir, then per
produce case run the producer test (Figure 4) on a fresh queue/topic while a BrokerMonitor samples the
broker, measure the bytes its data dir grew by, run the consumer test (Figure 5) on that queue, then the
latency test at a fixed rate; our broker adds the broker-only figures. Stop it (by pid) before the next.
A system that cannot be installed or started is recorded as an error in the results, not silently left out.
"""

from __future__ import annotations

import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench.harness.activemq import ActiveMQ
from bench.harness.common import MB, BrokerMonitor, Course, disk_usage, payload, percentiles
from bench.harness.nats_jetstream import NatsJetStream
from bench.harness.ours import Ours
from bench.harness.rabbitmq import RabbitMQ

SYSTEMS: dict[str, Callable[[], Any]] = {"ours": Ours, "rabbitmq": RabbitMQ, "activemq": ActiveMQ,
                                          "nats-jetstream": NatsJetStream}


@dataclass
class Settings:
    """What one run measures: counts, message size, latency rate, and which systems."""

    messages: int = 1_000_000
    message_size: int = 200
    latency_rate: int = 5000
    latency_messages: int = 25_000
    fetch_rounds: int = 3
    systems: tuple[str, ...] = tuple(SYSTEMS)
    log: Callable[[str], None] = print


def machine() -> str:
    cpus = 0
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    cpus += 1
    except OSError:
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as f:
            memory = f" {int(f.readline().split()[1]) // 1024 // 1024 + 1} GB RAM,"
    except (OSError, ValueError, IndexError):
        pass
    return f"{platform.node()}: {cpus or '?'} x {model},{memory} {platform.system()} {platform.release()}, " \
           f"Python {platform.python_version()}"


def _settled_disk(path: Path, timeout: float = 15.0) -> int:
    """Allocated bytes under ``path`` once two readings a second apart agree (async flushes landing)."""
    deadline = time.monotonic() + timeout
    previous = disk_usage(path)[0]
    while time.monotonic() < deadline:
        time.sleep(1.0)
        current = disk_usage(path)[0]
        if current == previous:
            return current
        previous = current
    return previous


def measure_system(name: str, settings: Settings, workdir: Path) -> dict[str, Any]:
    """All of one system's figures: produce/consume rows, latency, broker-only extras (ours), or its error."""
    adapter = SYSTEMS[name]()
    out: dict[str, Any] = {"rows": [], "courses": {}, "latency": None, "broker_only": None, "error": None}
    missing = adapter.missing()
    if missing:
        out["error"] = missing
        return out
    body = payload(settings.message_size)
    n = settings.messages
    settings.log(f"[{name}] starting")
    adapter.start(workdir / name)
    try:
        for case in adapter.produce_cases:
            queue = f"bench-b{case['batch']}-a{case['acks']}"
            before = disk_usage(adapter.data_dir)[0]
            course = Course()
            with BrokerMonitor(adapter.pid) as monitor:
                started = time.perf_counter()
                adapter.produce(queue, n, body, course, **case)
                elapsed = time.perf_counter() - started
            disk = _settled_disk(adapter.data_dir) - before
            row = _row(name, "produce", case, n, elapsed, settings.message_size, disk / n, monitor)
            out["rows"].append(row)
            out["courses"][f"{name} b={case['batch']} acks={case['acks']}"] = course.series(settings.message_size)
            settings.log(f"[{name}] produce {case}: {row['msgs_per_s']:,.0f} msg/s, {row['disk_bytes_per_msg']} B/msg")
            if case == getattr(adapter, "consume_case", adapter.produce_cases[0]):
                with BrokerMonitor(adapter.pid) as monitor:
                    started = time.perf_counter()
                    value_bytes = adapter.consume(queue, n)
                    elapsed = time.perf_counter() - started
                if value_bytes != n * settings.message_size:
                    raise RuntimeError(f"{name} consumed {value_bytes} bytes, expected {n * settings.message_size}")
                row = _row(name, "consume", case, n, elapsed, settings.message_size, disk / n, monitor)
                row["consumed_from"] = queue
                out["rows"].append(row)
                settings.log(f"[{name}] consume from {queue}: {row['msgs_per_s']:,.0f} msg/s")
        latencies = adapter.latency("bench-latency", body, settings.latency_rate, settings.latency_messages)
        out["latency"] = {"rate": settings.latency_rate, **percentiles(latencies)}
        settings.log(f"[{name}] latency at {settings.latency_rate} msg/s: {out['latency']}")
        if name == "ours":
            out["broker_only"] = _broker_only(adapter, settings, body)
    finally:
        adapter.stop()
        settings.log(f"[{name}] stopped")
    return out


def _broker_only(adapter: Ours, settings: Settings, body: bytes) -> dict[str, Any]:
    produce = [adapter.broker_only_produce(f"bench-raw-b{batch}", settings.messages, body, batch)
               for batch in (50, 1000)]
    for figures in produce:
        settings.log(f"[ours] broker-only produce batch {figures['batch']}: {figures['msgs_per_s']:,.0f} msg/s")
    stored = produce[0]["messages"]
    fetch = adapter.broker_only_fetch("bench-raw-b50", stored, settings.fetch_rounds)
    settings.log(f"[ours] broker-only fetch: sendfile {fetch['sendfile']['mb_per_s']} MB/s, "
                 f"read+send {fetch['read_and_send']['mb_per_s']} MB/s")
    return {"produce": produce, "fetch": fetch}


def _row(system: str, test: str, case: dict[str, int], messages: int, elapsed: float, size: int,
         disk_per_msg: float, monitor: BrokerMonitor) -> dict[str, Any]:
    return {"system": system, "test": test, "batch": case["batch"], "acks": case["acks"], "messages": messages,
            "msgs_per_s": round(messages / elapsed, 1), "mb_per_s": round(messages * size / elapsed / MB, 2),
            "disk_bytes_per_msg": round(disk_per_msg, 1), "seconds": round(elapsed, 3), **monitor.figures(messages)}


def run(settings: Settings, date: str, workdir: Path | None = None) -> dict[str, Any]:
    """Measure every selected system in one run; the results.json document."""
    results: list[dict[str, Any]] = []
    extra: dict[str, Any] = {"courses": {}, "latency": {}, "broker_only": None, "errors": {}}
    with tempfile.TemporaryDirectory(prefix="bench-", dir=workdir) as temp:
        for name in settings.systems:
            try:
                measured = measure_system(name, settings, Path(temp))
            except Exception as exc:  # one system failing must not lose the others' figures
                settings.log(f"[{name}] FAILED: {exc}")
                extra["errors"][name] = f"{type(exc).__name__}: {exc}"
                continue
            if measured["error"]:
                settings.log(f"[{name}] skipped: {measured['error']}")
                extra["errors"][name] = measured["error"]
            results.extend(measured["rows"])
            extra["courses"].update(measured["courses"])
            if measured["latency"]:
                extra["latency"][name] = measured["latency"]
            if measured["broker_only"]:
                extra["broker_only"] = measured["broker_only"]
    return {"date": date, "machine": machine(), "settings": {"messages": settings.messages,
            "message_size": settings.message_size, "latency_rate": settings.latency_rate,
            "latency_messages": settings.latency_messages}, "results": results, **extra}
