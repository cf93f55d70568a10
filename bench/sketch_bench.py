"""The audit sketch (audit/sketch.py): what it costs per event and how large a difference it decodes.

Cost: CPU time of ``EventSketch.add`` per event, for ids given as text (as the events carry them) in batches
of --batch (and of 100, 10 and 1: a window's ids arrive a few at a time), best of --repeat, the cells read
at the end (what is added is in the sketch). Decode limit: for each difference size d, --trials sketches of d random ids
(half missing, half duplicated) are decoded; the share decoded completely and exactly is printed, with the
decode time. Size: the serialized sketch, as carried by each AuditCount.

    .venv/bin/python -m bench.sketch_bench [--events 200000] [--batch 1000] [--trials 1000] [--cells-per-table 30]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from pipeline.auditing.sketch import DEFAULT_CELLS_PER_TABLE, HASHES, EventSketch


def add_cost(events: int, batch: int, repeat: int, per_table: int) -> float:
    ids = [str(uuid.uuid4()) for _ in range(events)]
    best = float("inf")
    for _ in range(repeat):
        sketch = EventSketch(per_table)
        started = time.process_time()
        for i in range(0, events, batch):
            sketch.add(ids[i:i + batch])
        sketch.cells.any()
        best = min(best, time.process_time() - started)
    return best / events


def decode_rate(d: int, trials: int, per_table: int) -> tuple[float, float]:
    ok = 0
    elapsed = 0.0
    for _ in range(trials):
        sketch = EventSketch(per_table)
        ids = [os.urandom(16) for _ in range(d)]
        sketch.add(ids[: d // 2], -1)
        sketch.add(ids[d // 2:], 1)
        started = time.process_time()
        result = sketch.decode()
        elapsed += time.process_time() - started
        ok += result.complete and len(result.counts) == d
    return ok / trials, elapsed / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--cells-per-table", type=int, default=DEFAULT_CELLS_PER_TABLE)
    args = parser.parse_args()
    per_table = args.cells_per_table
    size = EventSketch(per_table).size_bytes
    print(f"sketch: {HASHES} hashes x {per_table} cells = {HASHES * per_table} cells, {size} bytes serialized")
    for batch in (args.batch, 100, 10, 1):
        cost = add_cost(args.events, batch, args.repeat, per_table)
        print(f"add: {cost * 1e6:.2f} us CPU per event in batches of {batch} ({1 / cost:,.0f} events/s)")
    for d in (10, 20, 40, 60, 80, 100, 150):
        rate, seconds = decode_rate(d, args.trials, per_table)
        print(f"difference {d:4d}: decoded exactly in {rate:7.2%} of {args.trials} trials, {seconds * 1e3:.2f} ms each")


if __name__ == "__main__":
    main()
