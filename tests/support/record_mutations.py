"""Random damage to a record area, for the tests that check a fast path of record validation never
accepts what the record walk refuses."""

from __future__ import annotations

import random


def mutate(data: bytes, count: int, rng: random.Random) -> tuple[bytes, int]:
    """``data`` with one to three random faults (a byte replaced, a bit flipped, a byte inserted or
    removed, the tail cut) and ``count`` possibly off by one."""
    damaged = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(6)
        pos = rng.randrange(len(damaged) + 1)
        if op == 0 and pos < len(damaged):
            damaged[pos] = rng.randrange(256)
        elif op == 1 and pos < len(damaged):
            damaged[pos] ^= 1 << rng.randrange(8)
        elif op == 2:
            damaged[pos:pos] = bytes([rng.randrange(256)])
        elif op == 3 and pos < len(damaged):
            del damaged[pos]
        elif op == 4:
            count += rng.choice((-1, 1))
        else:
            del damaged[pos:]
    return bytes(damaged), count
