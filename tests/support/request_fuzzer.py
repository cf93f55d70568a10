"""A mutation fuzzer for the broker's request path, shared by the fuzz test and bench/broker_fuzz_bench.py.

Seeds are valid requests of every advertised API and version (tests/support/declared_requests.py, minimal and
one-of-each-entry bodies). A third of the frames are well-formed requests whose field values are hostile
(boundary integers, illegal names, empty or repeated entries, random bytes for records), encoded by the codec,
for the handlers; the rest are seeds mutated 1-3 times as bytes (bit flips, interesting values over bytes and
integers, truncation, insertion, deletion, duplication, splicing with another seed), mostly keeping their
API key and version so the decoder is exercised past the header, their length prefix fixed up most of the
time. Frames go out over many short connections, sometimes several pipelined in one write, and
each connection ends with a TCP reset, as a crashing or hostile client's would. The broker must stay up,
answer or close, and serve a normal client afterwards; :class:`FuzzReport` counts what happened and
collects the distinct tracebacks the broker logged.
"""

from __future__ import annotations

import random
import re
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pipeline.protocol.codec import ProtocolError

from tests.support import wire
from tests.support.declared_requests import advertised, minimal_body, populated_body, request_frame

_INTERESTING_8 = (0x00, 0x01, 0x7F, 0x80, 0xFF)
_INTERESTING_16 = (0, 1, -1, 0x7FFF, -0x8000, 0x100)
_INTERESTING_32 = (0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x10000, 255)
# Bytes of the request header kept as they are in most mutations: api key and version.
_HEADER_KEEP = 4
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):\n(?:[ \t].*\n)+\S.*$", re.MULTILINE)


_HOSTILE_STRINGS = ("", "evil\n", ".", "..", "x" * 250, "a/b", "\u00fc", "events", "__consumer_offsets", "declared")


def seed_frames() -> list[bytes]:
    """Valid request payloads (without their length prefix) of every advertised API version."""
    seeds = []
    for api_key, version in advertised():
        for body in (minimal_body(api_key, version), populated_body(api_key, version)):
            seeds.append(request_frame(api_key, version, 1, body)[4:])
    return seeds


def _hostile(value: Any, rng: random.Random) -> Any:
    """``value`` (a decoded request body or part of one) with some leaves replaced by hostile ones."""
    if isinstance(value, dict):
        return {key: _hostile(item, rng) if rng.random() < 0.5 else item for key, item in value.items()}
    if isinstance(value, list):
        if value and rng.random() < 0.2:
            return value * rng.randint(2, 5)  # the same entry several times
        return [_hostile(item, rng) for item in value]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice((-1, 0, 1, -(2**15), 2**15 - 1, -(2**31), 2**31 - 1, 7))
    if isinstance(value, str) or value is None:
        return rng.choice(_HOSTILE_STRINGS)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return rng.randbytes(rng.choice((0, 1, 12, 61, 200)))
    return value


class RequestMutator:
    """Mutated request frames from the seeds, reproducibly for a given ``seed``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seeds = seed_frames()
        self.versions = list(advertised())

    def frame(self) -> bytes:
        """One whole frame, length prefix included."""
        if self.rng.random() < 0.33:
            frame = self._hostile_values()
            if frame is not None:
                return frame
        return self._mutated_bytes()

    def _hostile_values(self) -> bytes | None:
        """A well-formed request with hostile field values (None when the codec cannot encode the values drawn:
        an integer out of its field's range)."""
        rng = self.rng
        api_key, version = rng.choice(self.versions)
        body = (populated_body if rng.random() < 0.7 else minimal_body)(api_key, version)
        try:
            return request_frame(api_key, version, rng.randrange(1 << 31), _hostile(body, rng))
        except (ProtocolError, struct.error, ValueError, TypeError, OverflowError):
            return None

    def _mutated_bytes(self) -> bytes:
        rng = self.rng
        payload = bytearray(rng.choice(self.seeds))
        keep = _HEADER_KEEP if rng.random() < 0.8 else 0
        for _ in range(rng.randint(1, 3)):
            self._mutate(payload, keep)
        length = len(payload)
        if rng.random() < 0.05:
            # A length that disagrees with the bytes sent: the frame ends early or runs into the next one.
            length = max(0, length + rng.choice((-8, -1, 1, 8, 64)))
        return struct.pack(">i", length) + bytes(payload)

    def _mutate(self, data: bytearray, keep: int) -> None:
        rng = self.rng
        if len(data) <= keep:
            data.extend(rng.randbytes(rng.randint(1, 16)))
            return
        at = rng.randrange(keep, len(data))
        kind = rng.randrange(8)
        if kind == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            data[at] = rng.choice(_INTERESTING_8)
        elif kind == 2 and at + 2 <= len(data):
            data[at:at + 2] = struct.pack(">h", rng.choice(_INTERESTING_16))
        elif kind == 3 and at + 4 <= len(data):
            data[at:at + 4] = struct.pack(">i", rng.choice(_INTERESTING_32))
        elif kind == 4:
            del data[at:]
        elif kind == 5:
            data[at:at] = rng.randbytes(rng.randint(1, 32))
        elif kind == 6:
            del data[at:at + rng.randint(1, 16)]
        elif kind == 7:
            other = rng.choice(self.seeds)
            data[at:] = other[rng.randrange(len(other)):]
        else:
            data[at:at] = data[at:at + rng.randint(1, 16)]


@dataclass
class FuzzReport:
    """What a fuzz run saw: frames sent, outcomes per connection, failed normal-client checks."""

    frames: int = 0
    connections: Counter = field(default_factory=Counter)
    failed_checks: list[str] = field(default_factory=list)

    def summary(self) -> str:
        outcomes = ", ".join(f"{count} {name}" for name, count in sorted(self.connections.items()))
        return f"{self.frames} frames over {sum(self.connections.values())} connections ({outcomes})"


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def send_frames(host: str, port: int, frames: list[bytes], wait_s: float) -> str:
    """Send ``frames`` in one write on a new connection, wait up to ``wait_s`` for the first bytes back, reset;
    the outcome: answered, closed or silent (no answer: an acks=0 produce, a parked wait, a frame cut short)."""
    sock = socket.create_connection((host, port), timeout=5)
    try:
        sock.sendall(b"".join(frames))
        sock.settimeout(wait_s)
        try:
            return "answered" if sock.recv(65536) else "closed"
        except socket.timeout:
            return "silent"
        except ConnectionError:
            return "closed"
    except ConnectionError:
        return "closed"
    finally:
        reset(sock)


def normal_client_served(host: str, port: int, timeout_s: float = 5.0) -> str | None:
    """None when ApiVersions and Metadata are answered on a new connection within ``timeout_s``, else why not."""
    try:
        with wire.KafkaConnection(host, port, timeout=timeout_s) as conn:
            if not wire.api_versions(conn):
                return "ApiVersions listed no API"
            conn.request(wire.API_METADATA, 1, wire.Writer().int32(-1).getvalue())
    except (OSError, AssertionError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def fuzz(host: str, port: int, seconds: float, seed: int, report: FuzzReport | None = None, *,
         wait_s: float = 0.02, check_every: int = 500) -> FuzzReport:
    """Send mutated frames for ``seconds``; a normal client is checked every ``check_every`` connections."""
    mutator = RequestMutator(seed)
    report = report if report is not None else FuzzReport()
    rng = random.Random(seed + 1)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        frames = [mutator.frame() for _ in range(1 if rng.random() < 0.8 else rng.randint(2, 4))]
        try:
            outcome = send_frames(host, port, frames, wait_s)
        except OSError as exc:
            outcome = f"refused ({type(exc).__name__})"
        report.frames += len(frames)
        report.connections[outcome] += 1
        if sum(report.connections.values()) % check_every == 0:
            failure = normal_client_served(host, port)
            if failure is not None:
                report.failed_checks.append(failure)
    return report


def distinct_tracebacks(log_text: str) -> dict[str, int]:
    """The tracebacks in a broker log keyed by their last frame and exception line, with their counts."""
    found: Counter[str] = Counter()
    for match in _TRACEBACK.finditer(log_text):
        lines = match.group(0).splitlines()
        frames = [line.strip() for line in lines if line.lstrip().startswith("File ")]
        found[f"{frames[-1] if frames else '?'} -> {lines[-1]}"] += 1
    return dict(found)
