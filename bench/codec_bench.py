"""Record codec benchmark: our RecordBatch v2 codec against kafka-python's, records per second.

Encodes N records (default 1,000,000) of 200-byte values into batches of 50 and of 1000 records,
uncompressed and with each codec, then decodes them again the way a consumer does (one fetch-sized
buffer of about 1 MiB at a time, records dropped after use). Each figure is the best of --repeat runs
on one core. The values are log-line-like text (compressible, as real events are).

    .venv/bin/python -m bench.codec_bench [--records N] [--batch 50 --batch 1000] [--codec none ...]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Callable

from pipeline.protocol import compression
from pipeline.records import decode_records, encode_batch

FETCH_BYTES = 1 << 20
TIMESTAMP = 1_700_000_000_000


def make_values(count: int, size: int, spread: int = 0, seed: int = 1) -> list[bytes]:
    """``count`` distinct log-line-like values of ``size`` bytes (give or take up to ``spread``)."""
    rng = random.Random(seed)
    pages = ["/home", "/jobs/search", "/profile/view", "/feed/update", "/messaging/inbox", "/groups/42"]
    values = []
    for i in range(count):
        line = (
            f'{{"event":"PageViewEvent","member":{rng.randrange(10**8)},"page":"{rng.choice(pages)}",'
            f'"server":"app{rng.randrange(500):03d}.dc1","time":{TIMESTAMP + i},"session":"{rng.getrandbits(64):016x}"'
        ).encode()
        length = size + rng.randint(-spread, spread)
        values.append((line + b" " * length)[: length - 1] + b"}")
    return values


def chunk_batches(batches: list[bytes]) -> list[bytes]:
    """Group encoded batches into fetch-sized buffers (whole batches, about FETCH_BYTES each)."""
    chunks, current, size = [], [], 0
    for batch in batches:
        current.append(batch)
        size += len(batch)
        if size >= FETCH_BYTES:
            chunks.append(b"".join(current))
            current, size = [], 0
    if current:
        chunks.append(b"".join(current))
    return chunks


def best_of(repeat: int, run: Callable[[], object]) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def ours_encode(values: list[bytes], batch: int, codec: int, total: int) -> list[bytes]:
    out = []
    for base in range(0, total, batch):
        out.append(encode_batch(values[:batch], timestamp=TIMESTAMP, base_offset=base, compression=codec))
    return out


def ours_decode(chunks: list[bytes]) -> int:
    count = 0
    for chunk in chunks:
        records, _ = decode_records(chunk)
        count += len(records)
        for record in records:
            record.value
    return count


def kafka_python_encode(values: list[bytes], batch: int, codec: int, total: int) -> list[bytes]:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    out = []
    for base in range(0, total, batch):
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        for i, value in enumerate(values[:batch]):
            builder.append(i, timestamp=TIMESTAMP, key=None, value=value, headers=[])
        encoded = bytearray(builder.build())
        encoded[0:8] = base.to_bytes(8, "big")
        out.append(bytes(encoded))
    return out


def kafka_python_decode(chunks: list[bytes]) -> int:
    from kafka.record.memory_records import MemoryRecords

    count = 0
    for chunk in chunks:
        records = MemoryRecords(chunk)
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            for record in batch:
                record.value
                count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per measurement (default 1,000,000)")
    parser.add_argument("--value-size", type=int, default=200, help="bytes per value (default 200)")
    parser.add_argument("--value-spread", type=int, default=0, help="vary value sizes by up to this many bytes (default 0)")
    parser.add_argument("--batch", type=int, action="append", help="records per batch (default: 50 and 1000)")
    parser.add_argument("--codec", action="append", help="none, gzip, snappy, lz4, zstd (default: all)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per figure, best one kept (default 2)")
    parser.add_argument("--no-kafka-python", action="store_true", help="measure only our codec")
    args = parser.parse_args(argv)
    batches = args.batch or [50, 1000]
    codecs = [compression.codec_from_name(name) for name in (args.codec or ["none", "gzip", "snappy", "lz4", "zstd"])]

    values = make_values(max(batches), args.value_size, args.value_spread)
    total = args.records
    spread = f" (+-{args.value_spread})" if args.value_spread else ""
    print(f"{total:,} records of {args.value_size}{spread}-byte values; records/s, best of {args.repeat}")
    print(f"{'codec':<7}{'batch':>6}  {'ours encode':>12}{'ours decode':>12}  {'k-py encode':>12}{'k-py decode':>12}  {'bytes/rec':>9}")
    for codec in codecs:
        for batch in batches:
            n = total - total % batch
            enc_time, encoded = best_of(args.repeat, lambda: ours_encode(values, batch, codec, n))
            chunks = chunk_batches(encoded)  # type: ignore[arg-type]
            dec_time, count = best_of(args.repeat, lambda: ours_decode(chunks))
            assert count == n, (count, n)
            size = sum(map(len, chunks)) / n
            row = f"{compression.CODEC_NAMES[codec]:<7}{batch:>6}  {n / enc_time:>12,.0f}{n / dec_time:>12,.0f}"
            if not args.no_kafka_python:
                kenc_time, kencoded = best_of(args.repeat, lambda: kafka_python_encode(values, batch, codec, n))
                kchunks = chunk_batches(kencoded)  # type: ignore[arg-type]
                kdec_time, kcount = best_of(args.repeat, lambda: kafka_python_decode(kchunks))
                assert kcount == n, (kcount, n)
                row += f"  {n / kenc_time:>12,.0f}{n / kdec_time:>12,.0f}"
            else:
                row += f"  {'-':>12}{'-':>12}"
            print(row + f"  {size:>9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
