"""Frontend emulator benchmark: events per second one emulator process sustains, encoding and producing.

Starts a standalone broker and registry, then runs the emulator in this process at a rate it cannot
reach (--rate, default 10 million events/s; or a rate it can, such as 5000, to see the cost at a given load)
for --duration seconds, and reports the events handed to the producer per second, those the broker
acknowledged, and the process's CPU time per event (all its threads: the emulator's, the producer's sender,
the audit publisher). Also measures the CPU per event of the stages alone, without a broker (best of three
runs of 100,000 events): drawing events from the workload model, and drawing plus Avro encoding.

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


def _best_cpu_per_event(step, events: int, repeats: int = 3) -> float:
    """The least CPU seconds per event over `repeats` runs of `step(events)` (which returns the events it made)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        made = step(events)
        best = min(best, (time.process_time() - started) / made)
    return best


def stages(registry_url: str, servers: int, events: int = 100_000) -> tuple[float, float]:
    """(CPU s per event drawn from the workload, CPU s per event drawn and Avro-encoded), best of three, in batches
    of 1,000 events."""
    workload = Workload("dc1", servers, seed=1)
    clock = [int(time.time() * 1000)]

    def draw(n: int) -> int:
        drawn = 0
        while drawn < n:
            drawn += len(workload.next_events(clock[0], 1000))
            clock[0] += 5
        return drawn

    encoder = AvroEncoder(SchemaRegistryClient(registry_url),
                          {topic: load_schema(name) for topic, name in EVENT_TOPICS.items()})

    def draw_and_encode(n: int) -> int:
        encoded = 0
        while encoded < n:
            by_topic: dict[str, list] = {}
            for event in workload.next_events(clock[0], 1000):
                by_topic.setdefault(event.topic, []).append(event.value)
            for topic, values in by_topic.items():
                encoded += len(encoder.encode_for(topic, values))
            clock[0] += 5
        return encoded

    return _best_cpu_per_event(draw, events), _best_cpu_per_event(draw_and_encode, events)


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
            draw_cpu, encode_cpu = stages(registry.url, args.servers)
            print(f"workload model alone:        {draw_cpu * 1e6:>10.2f} us CPU/event")
            print(f"workload + Avro encoding:    {encode_cpu * 1e6:>10.2f} us CPU/event")
            config = EmulatorConfig({"bootstrap.servers": broker.bootstrap, "schema.registry.url": registry.url,
                                     "servers": args.servers, "rate": args.rate, "duration.s": args.duration,
                                     "compression.codec": args.codec})
            emulator = FrontendEmulator(config)
            cpu_started = time.process_time()
            emulator.run(threading.Event())
            cpu = time.process_time() - cpu_started
            acknowledged = total(emulator.metrics.acknowledged)
            print(f"emulator, sent to producer:  {emulator.sent / emulator.elapsed_s:>10,.0f} events/s "
                  f"({emulator.sent} in {emulator.elapsed_s:.1f} s, {args.servers} servers, {args.codec})")
            print(f"emulator, acknowledged:      {acknowledged / emulator.elapsed_s:>10,.0f} events/s "
                  f"({acknowledged} acknowledged, {total(emulator.metrics.failed)} failed)")
            print(f"emulator, CPU (all threads): {cpu / max(1, emulator.sent) * 1e6:>10.2f} us CPU/event "
                  f"({cpu:.1f} s CPU, {cpu / emulator.elapsed_s:.2f} cores)")


if __name__ == "__main__":
    main()
