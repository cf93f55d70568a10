"""What every system adapter shares: child processes, the broker monitor, payloads, disk usage, results.

* :class:`ChildProcess` is the tests' process harness (tests.support.process) for a server: it holds the real pid,
  waits for a readiness check with a deadline and stops exactly that pid (SIGTERM, then SIGKILL after a grace time).
* :class:`BrokerMonitor` samples a broker's process tree (the pid and its descendants) for CPU seconds
  and resident memory while a test runs.
* :class:`Course` records (seconds, messages) points during a produce run, for the throughput-versus-MB plot.
* :func:`disk_usage` is the bytes a directory tree occupies (allocated blocks and apparent sizes).
"""

from __future__ import annotations

import os
import socket
import statistics
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from tests.support.ports import free_port
from tests.support.process import ChildProcess as HarnessProcess

MESSAGE_SIZE = 200
MB = 1_000_000
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_STAMP = struct.Struct(">q")


class BenchError(RuntimeError):
    """A system could not be started, measured or stopped."""


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``condition`` until it holds; BenchError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def payload(size: int = MESSAGE_SIZE) -> bytes:
    """A message body of ``size`` bytes (printable, not trivially compressible by position)."""
    return bytes(33 + (i * 7919) % 94 for i in range(size))


def stamped(body: bytes) -> bytes:
    """``body`` with its first 8 bytes replaced by the current monotonic time in ns (latency tests)."""
    return _STAMP.pack(time.monotonic_ns()) + body[8:]


def stamp_of(message: bytes) -> int:
    return _STAMP.unpack_from(message)[0]


def paced(count: int, rate: int) -> Iterator[int]:
    """0..count-1, sleeping between items so that they come at ``rate`` per second from the first one."""
    interval = 1.0 / rate
    start = time.perf_counter()
    for i in range(count):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        yield i


def latency_result(latencies: list[int], count: int, errors: Sequence[BaseException] = ()) -> list[int]:
    """The latencies a latency run measured, or the consumer's error, or a BenchError if any went missing."""
    if errors:
        raise errors[0]
    if len(latencies) < count:
        raise BenchError(f"latency consumer got {len(latencies)} of {count} messages")
    return latencies


class ServerAdapter:
    """What every system adapter holds: its server process, its port and its data directory."""

    name = ""
    produce_cases: tuple[dict[str, int], ...] = ()

    def __init__(self) -> None:
        self.server: ChildProcess | None = None
        self.port = 0
        self.data_dir = Path()

    @property
    def pid(self) -> int:
        if self.server is None:
            raise BenchError(f"{self.name} is not running")
        return self.server.pid


class ChildProcess(HarnessProcess):
    """One server process we started and will stop by its own pid, on the tests' process harness
    (tests.support.process): output to a log file, BenchError with the log tail when it does not come up."""

    error = BenchError

    def __init__(self, name: str, command: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        super().__init__(name, command, log_path, env=env, cwd=cwd)

    def start(self, ready: Callable[[], bool], timeout: float) -> ChildProcess:  # type: ignore[override]
        """Start the process and poll ``ready`` until true; on failure kill it and raise with the log tail."""
        super().start(ready, timeout, interval=0.2)
        return self

    def stop(self, grace: float = 30.0) -> None:  # type: ignore[override]
        """SIGTERM our pid, wait up to ``grace`` seconds, then SIGKILL it (a slow stop is no benchmark error)."""
        try:
            super().stop(grace)
        except BenchError:
            pass


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _cpu_and_rss(pids: Sequence[int]) -> tuple[float, int]:
    cpu, rss = 0.0, 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # utime, stime are fields 14 and 15 of /proc/pid/stat; rss (pages) is field 24.
        cpu += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        rss += int(fields[21]) * _PAGE_SIZE
    return cpu, rss


class BrokerMonitor:
    """Samples a broker's process tree during a test: CPU seconds used and resident memory (peak, mean)."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid = pid
        self.interval = interval
        self.rss_samples: list[int] = []
        self.cpu_seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-monitor", daemon=True)
        self._pids: list[int] = []
        self._start_cpu = 0.0

    def __enter__(self) -> "BrokerMonitor":
        self._pids = _descendants(self.pid)
        self._start_cpu, rss = _cpu_and_rss(self._pids)
        self.rss_samples.append(rss)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.rss_samples.append(_cpu_and_rss(self._pids)[1])

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        cpu, rss = _cpu_and_rss(self._pids)
        self.rss_samples.append(rss)
        self.cpu_seconds = cpu - self._start_cpu

    def figures(self, messages: int) -> dict[str, float]:
        """CPU seconds per million messages and RSS in MB (peak and mean) over the test."""
        return {
            "broker_cpu_s": round(self.cpu_seconds, 3),
            "broker_cpu_s_per_million": round(self.cpu_seconds / messages * 1e6, 2) if messages else 0.0,
            "broker_rss_peak_mb": round(max(self.rss_samples) / MB, 1),
            "broker_rss_mean_mb": round(statistics.fmean(self.rss_samples) / MB, 1),
        }


@dataclass
class Course:
    """(elapsed seconds, messages sent) points taken during a produce run, at most every ``interval`` s."""

    interval: float = 0.05
    points: list[tuple[float, int]] = field(default_factory=list)
    _start: float = 0.0
    _next: float = 0.0

    def begin(self) -> None:
        self._start = time.perf_counter()
        self._next = self._start + self.interval
        self.points = [(0.0, 0)]

    def mark(self, sent: int) -> None:
        now = time.perf_counter()
        if now >= self._next:
            self.points.append((now - self._start, sent))
            self._next = now + self.interval

    def end(self, sent: int) -> None:
        self.points.append((time.perf_counter() - self._start, sent))

    def series(self, message_size: int, buckets: int = 40) -> list[dict[str, float]]:
        """Throughput (msg/s) against MB sent, over about ``buckets`` equal stretches of the run."""
        if len(self.points) < 2:
            return []
        total = self.points[-1][1]
        step = max(1, total // buckets)
        out, last_t, last_n = [], 0.0, 0
        for t, n in self.points[1:]:
            if n - last_n >= step or n == total:
                if t > last_t and n > last_n:
                    out.append({"mb_sent": round(n * message_size / MB, 3),
                                "msgs_per_s": round((n - last_n) / (t - last_t), 1)})
                last_t, last_n = t, n
        return out


def disk_usage(path: Path) -> tuple[int, int]:
    """(allocated bytes, apparent bytes) of every regular file under ``path``."""
    allocated = apparent = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            allocated += st.st_blocks * 512
            apparent += st.st_size
    return allocated, apparent


def percentiles(latencies_ns: Sequence[int]) -> dict[str, float]:
    """p50, p99, p99.9 and max of latencies given in ns, in milliseconds."""
    if not latencies_ns:
        return {}
    ordered = sorted(latencies_ns)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6, 3)

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "p99_9_ms": at(0.999), "max_ms": round(ordered[-1] / 1e6, 3),
            "samples": len(ordered)}
