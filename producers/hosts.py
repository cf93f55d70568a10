"""Resource usage of one emulated frontend host, sampled into SystemMetricsEvent fields.

A host has fixed hardware (memory and disk sizes drawn once) and usage that follows its load, the
requests (page views and searches) and backend calls it served and the events it published since the
previous sample:
- CPU: a small idle share plus a share that saturates with the request rate (1 - exp(-rate/capacity)),
  with autocorrelated noise, so consecutive samples drift rather than jump.
- Memory: a resident base (the JVM heap and caches) plus a share growing with load, and a slow random walk.
- Disk: grows with the access and service-call logs the host writes; when it passes 85 % the old logs
  are rotated away and it falls back.
- Network: request and response bytes per request and per backend call, the events published, and a
  little background traffic, with noise.
"""

from __future__ import annotations

import math
import random
from typing import Any

GIB = 1 << 30
MEMORY_SIZES = (32 * GIB, 64 * GIB, 128 * GIB)
DISK_SIZES = (480 * 10**9, 960 * 10**9, 1920 * 10**9)

CPU_CAPACITY_REQUESTS_PER_S = 900.0
"""Request rate at which the load share of the CPU reaches 63 % (1 - 1/e) of its maximum."""
LOG_BYTES_PER_REQUEST = 350
LOG_BYTES_PER_CALL = 180
REQUEST_BYTES_IN, REQUEST_BYTES_OUT = 2_200, 48_000
CALL_BYTES_IN, CALL_BYTES_OUT = 3_500, 600
EVENT_BYTES_OUT = 380
BACKGROUND_BYTES_PER_S = 20_000.0


class HostResources:
    """The hardware and the drifting usage state of one host."""

    __slots__ = ("memory_total", "disk_total", "disk_used", "_memory_base", "_idle_cpu", "_cpu_noise",
                 "_memory_walk")

    def __init__(self, rng: random.Random) -> None:
        self.memory_total = rng.choice(MEMORY_SIZES)
        self.disk_total = rng.choice(DISK_SIZES)
        self.disk_used = int(self.disk_total * rng.uniform(0.30, 0.60))
        self._memory_base = self.memory_total * rng.uniform(0.25, 0.40)
        self._idle_cpu = rng.uniform(1.5, 5.0)
        self._cpu_noise = 0.0
        self._memory_walk = 0.0

    def sample(self, rng: random.Random, elapsed_s: float, requests: int, calls: int,
               events: int) -> dict[str, Any]:
        """The SystemMetricsEvent fields (no header) for an interval of `elapsed_s` seconds with this load."""
        elapsed_s = max(elapsed_s, 0.001)
        request_rate, call_rate = requests / elapsed_s, calls / elapsed_s
        load = 1.0 - math.exp(-request_rate / CPU_CAPACITY_REQUESTS_PER_S)
        self._cpu_noise = 0.7 * self._cpu_noise + rng.gauss(0.0, 1.5)
        cpu = min(100.0, max(0.1, self._idle_cpu + 92.0 * load + self._cpu_noise))
        self._memory_walk = min(0.1, max(-0.1, self._memory_walk + rng.gauss(0.0, 0.004)))
        memory_share = self._memory_base / self.memory_total + 0.15 * load + self._memory_walk
        memory_used = int(self.memory_total * min(0.97, max(0.05, memory_share)))
        self.disk_used += requests * LOG_BYTES_PER_REQUEST + calls * LOG_BYTES_PER_CALL + int(
            rng.uniform(0.0, 2_000_000.0) * elapsed_s)
        if self.disk_used > 0.85 * self.disk_total:
            self.disk_used = int(self.disk_total * rng.uniform(0.50, 0.60))
        noise_in, noise_out = 1.0 + rng.gauss(0.0, 0.05), 1.0 + rng.gauss(0.0, 0.05)
        network_in = (request_rate * REQUEST_BYTES_IN + call_rate * CALL_BYTES_IN) * noise_in
        network_out = (request_rate * REQUEST_BYTES_OUT + call_rate * CALL_BYTES_OUT
                       + events / elapsed_s * EVENT_BYTES_OUT) * noise_out
        return {
            "cpuPercent": round(cpu, 2),
            "memoryUsedBytes": memory_used,
            "memoryTotalBytes": self.memory_total,
            "diskUsedBytes": self.disk_used,
            "diskTotalBytes": self.disk_total,
            "networkInBytesPerSec": round(max(0.0, network_in) + BACKGROUND_BYTES_PER_S * noise_in, 1),
            "networkOutBytesPerSec": round(max(0.0, network_out) + BACKGROUND_BYTES_PER_S * noise_out, 1),
        }
