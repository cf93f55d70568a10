"""producers.hosts: an emulated host's SystemMetricsEvent fields stay within its hardware, follow its load, and
are reproducible from the seed."""

from __future__ import annotations

import random

from producers.hosts import DISK_SIZES, MEMORY_SIZES, HostResources


def samples(seed: int, requests: int, count: int = 50) -> list[dict]:
    rng = random.Random(seed)
    host = HostResources(rng)
    return [host.sample(rng, 1.0, requests, requests // 2, requests // 10) for _ in range(count)]


def test_the_same_seed_gives_the_same_host_and_samples() -> None:
    assert samples(7, 300) == samples(7, 300)
    assert samples(7, 300) != samples(8, 300)


def test_every_sample_stays_within_the_host_s_hardware() -> None:
    for seed in range(20):
        for sample in samples(seed, 2_000, 20):
            assert sample["memoryTotalBytes"] in MEMORY_SIZES and sample["diskTotalBytes"] in DISK_SIZES
            assert 0.1 <= sample["cpuPercent"] <= 100.0
            assert 0 < sample["memoryUsedBytes"] <= 0.97 * sample["memoryTotalBytes"]
            assert 0 < sample["diskUsedBytes"] <= 0.85 * sample["diskTotalBytes"]
            assert sample["networkInBytesPerSec"] > 0 and sample["networkOutBytesPerSec"] > 0


def test_cpu_and_network_follow_the_request_rate() -> None:
    def mean(field: str, requests: int) -> float:
        return sum(s[field] for seed in range(10) for s in samples(seed, requests)) / 500

    assert mean("cpuPercent", 2_000) > mean("cpuPercent", 50) + 40
    assert mean("networkOutBytesPerSec", 2_000) > 10 * mean("networkOutBytesPerSec", 50)


def test_a_full_disk_rotates_its_logs_away() -> None:
    rng = random.Random(3)
    host = HostResources(rng)
    host.disk_used = int(0.85 * host.disk_total)
    sample = host.sample(rng, 1.0, 1_000_000, 0, 0)
    assert 0.50 * host.disk_total <= sample["diskUsedBytes"] <= 0.60 * host.disk_total


def test_an_interval_of_no_time_is_taken_as_a_millisecond() -> None:
    rng = random.Random(1)
    sample = HostResources(rng).sample(rng, 0.0, 1, 0, 0)
    assert sample["networkInBytesPerSec"] > 1_000 * 2_200 * 0.5
