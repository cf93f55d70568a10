"""Frontend emulator benchmark: events per second one emulator process sustains, encoding and producing.

Starts a standalone broker and registry, then runs the emulator in this process at a rate it cannot
reach (--rate, default 10 million events/s) for --duration seconds, and reports the events handed to the
producer per second and those the broker acknowledged. Also measures the stages alone, without a
broker: drawing events from the workload model, and drawing plus Avro encoding.

    .venv/bin/python -m bench.emulator_bench [--duration 20] [--servers 10] [--codec lz4]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
from pathlib import Path

from producers.config import EmulatorConfig
from producers.emulator import FrontendEmulator
from producers.metrics import total
from producers.workload import Workload
from schemas.events import EVENT_TOPICS, load_schema
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroEncoder
from tests.support import BrokerProcess
from tests.support.registry import RegistryProcess


def stages(registry_url: str, servers: int, seconds: float) -> tuple[float, float]:
    """(events/s drawn from the workload, events/s drawn and encoded), each over `seconds`."""
    workload = Workload("dc1", servers, seed=1)
    drawn, started = 0, time.perf_counter()
    now_ms = int(time.time() * 1000)
    while time.perf_counter() - started < seconds:
        drawn += len(workload.next_events(now_ms, 1000))
        now_ms += 5
    draw_rate = drawn / (time.perf_counter() - started)
    encoder = AvroEncoder(SchemaRegistryClient(registry_url),
                          {topic: load_schema(name) for topic, name in EVENT_TOPICS.items()})
    encoded, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        by_topic: dict[str, list] = {}
        for event in workload.next_events(now_ms, 1000):
            by_topic.setdefault(event.topic, []).append(event.value)
        for topic, values in by_topic.items():
            encoded += len(encoder.encode_for(topic, values))
        now_ms += 5
    return draw_rate, encoded / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--rate", type=float, default=10_000_000.0)
    parser.add_argument("--codec", default="lz4")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        with BrokerProcess(root / "logs", overrides={"num.partitions": 3}) as broker, \
                RegistryProcess(root / "registry.log", data_dir=root / "registry") as registry:
            draw_rate, encode_rate = stages(registry.url, args.servers, 5.0)
            print(f"workload model alone:        {draw_rate:>10,.0f} events/s")
            print(f"workload + Avro encoding:    {encode_rate:>10,.0f} events/s")
            config = EmulatorConfig({"bootstrap.servers": broker.bootstrap, "schema.registry.url": registry.url,
                                     "servers": args.servers, "rate": args.rate, "duration.s": args.duration,
                                     "compression.codec": args.codec})
            emulator = FrontendEmulator(config)
            emulator.run(threading.Event())
            acknowledged = total(emulator.metrics.acknowledged)
            print(f"emulator, sent to producer:  {emulator.sent / emulator.elapsed_s:>10,.0f} events/s "
                  f"({emulator.sent} in {emulator.elapsed_s:.1f} s, {args.servers} servers, {args.codec})")
            print(f"emulator, acknowledged:      {acknowledged / emulator.elapsed_s:>10,.0f} events/s "
                  f"({acknowledged} acknowledged, {total(emulator.metrics.failed)} failed)")


if __name__ == "__main__":
    main()
