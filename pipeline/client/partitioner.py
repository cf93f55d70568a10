"""Partitioners: which partition of a topic a message goes to, given its (serialized) key.

:class:`DefaultPartitioner` computes ``murmur2(key) & 0x7fffffff`` modulo the partition count, exactly as
the Java client and kafka-python do, so a key lands on the same partition whichever client sends it.
A null key gets a random partition; the producer asks once per ``ProducerData``, so all messages of one
keyless ``ProducerData`` stay together in one batch ("sticky per batch").
"""

from __future__ import annotations

import random
import struct
from abc import ABC, abstractmethod

__all__ = ["Partitioner", "DefaultPartitioner", "RoundRobinPartitioner", "murmur2"]

_MASK32 = 0xFFFFFFFF
_random = random.random
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def murmur2(data: bytes) -> int:
    """MurmurHash2 (32-bit, seed 0x9747b28c) of ``data`` as a signed int32, as Kafka's Utils.murmur2 returns it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    if whole:
        for k in struct.unpack_from(f"<{whole // 4}I", data):
            k = (k * _M) & _MASK32
            k ^= k >> _R
            k = (k * _M) & _MASK32
            h = ((h * _M) & _MASK32) ^ k
    extra = length - whole
    if extra:
        if extra == 3:
            h ^= data[whole + 2] << 16
        if extra >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


class Partitioner(ABC):
    """Chooses a partition in ``range(num_partitions)`` for a serialized key (None for a null key)."""

    @abstractmethod
    def partition(self, key: bytes | None, num_partitions: int) -> int:
        """The partition for ``key``."""


class DefaultPartitioner(Partitioner):
    """murmur2 of the key, as Kafka's Java client; a random partition for a null key.

    Hashes of recent keys are memoised (keys repeat in real traffic: user ids, page ids).
    """

    _CACHE_LIMIT = 1 << 16

    def __init__(self) -> None:
        self._hashes: dict[bytes, int] = {}

    def partition(self, key: bytes | None, num_partitions: int) -> int:
        if key is None:
            return int(_random() * num_partitions)
        positive = self._hashes.get(key)
        if positive is None:
            positive = murmur2(key) & 0x7FFFFFFF
            if len(self._hashes) >= self._CACHE_LIMIT:
                self._hashes.clear()
            self._hashes[bytes(key)] = positive
        return positive % num_partitions


class RoundRobinPartitioner(Partitioner):
    """Ignores the key and cycles through the partitions (even spread when keys are absent or skewed)."""

    def __init__(self) -> None:
        self._next = 0

    def partition(self, key: bytes | None, num_partitions: int) -> int:
        self._next += 1
        return self._next % num_partitions
