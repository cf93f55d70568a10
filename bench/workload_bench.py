"""Frontend emulator event model: how fast `producers.workload.Workload` makes events, alone and Avro-encoded.

Builds a Workload (default: 1,000,000 members, 10 servers) and times `next_events(now_ms, count)` with
count=1000 per call, the clock advancing 10 ms per call (so the host metrics fall due as in a live run),
until --events events were made. The second figure adds what the emulator pays next: each event's value
encoded with fastavro's schemaless writer against its schema (the Confluent framing is five bytes on
top). Each figure is the best of --repeat runs, in CPU time of this one-threaded process (so that
other load on a shared machine does not count); setup is timed apart.

    .venv/bin/python -m bench.workload_bench [--events 300000] [--members 1000000] [--servers 10]
                                             [--count 1000] [--repeat 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import fastavro

from producers.workload import Event, Workload
from schemas.events import EVENT_NAMES, parsed_schema

START_MS = 1_795_000_000_000


def generate(workload: Workload, events: int, count: int) -> list[Event]:
    """Call next_events until `events` events were made; returns them."""
    out: list[Event] = []
    now = START_MS
    while len(out) < events:
        out.extend(workload.next_events(now, count))
        now += 10
    return out


def encode(events: list[Event]) -> int:
    """Avro-encode every event's value; returns the total bytes."""
    schemas = {name: parsed_schema(name) for name in EVENT_NAMES}
    writer = fastavro.schemaless_writer
    total = 0
    for event in events:
        buffer = io.BytesIO()
        writer(buffer, schemas[event.topic], event.value)
        total += buffer.tell()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="profile one generation run and print the top")
    args = parser.parse_args()

    def build() -> Workload:
        return Workload("dc1", args.servers, seed=1, members=args.members)

    start = time.perf_counter()
    build()
    setup = time.perf_counter() - start
    print(f"Workload(members={args.members:,}, servers={args.servers}) set up in {setup * 1000:.1f} ms")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        generate(build(), args.events, args.count)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        return
    best_generate, best_both, size = float("inf"), float("inf"), 0
    for _ in range(args.repeat):
        workload = build()
        start = time.process_time()
        events = generate(workload, args.events, args.count)
        generated = time.process_time() - start
        size = encode(events)
        both = time.process_time() - start
        best_generate = min(best_generate, generated / len(events))
        best_both = min(best_both, both / len(events))
    print(f"  next_events (count={args.count})        {1 / best_generate:12,.0f} events/s")
    print(f"  next_events + Avro encoding          {1 / best_both:12,.0f} events/s"
          f"  ({size / len(events):.0f} bytes/event on average)")


if __name__ == "__main__":
    main()
