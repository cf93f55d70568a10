"""A log cleaner worker: the process in which one of the broker's log cleaner threads runs its passes.

Cleaning is CPU-bound Python (record parsing, key digests, recompression). Run on a thread of the broker,
it would hold the interpreter lock the network event loop needs, and produce and fetch would slow to a
fraction while a log is cleaned. So each cleaner thread hands its passes to a worker process of its own
(see cleaner_process.CleanerProcess): the broker sends a CleaningJob with descriptors of the log's
segments, the worker builds the offset map and writes each ``.cleaned`` segment, then asks the broker to
swap it in (the log and its lock live in the broker) and goes on with the next group. The broker can abort
a pass between two batches. The worker dies with the broker (PR_SET_PDEATHSIG) and exits when its
channel closes.

    python -m broker.log.cleaner_worker --fd N    (started by the broker, never by hand)
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import sys
import traceback
from typing import Sequence

from broker.log.cleaner_channel import Channel, ChannelClosedError
from broker.log.errors import KafkaStorageError
from broker.log.cleaner import Cleaner, CleanerConfig, CleaningJob, SegmentInfo, Throttler
from broker.log.log_cleaner_manager import LogCleaningAbortedError
from broker.log.log_segment import LogSegment

_PR_SET_PDEATHSIG = 1


class WorkerTarget:
    """The CleaningTarget of a pass in the worker: segments read through the descriptors the broker sent,
    aborts and swaps by message."""

    def __init__(self, channel: Channel, job: CleaningJob, fds: list[int]) -> None:
        self.channel = channel
        self.job = job
        self._fds = {segment.base_offset: fd for segment, fd in zip(job.segments, fds)}

    def open_segment(self, segment: SegmentInfo) -> int:
        return os.dup(self._fds[segment.base_offset])

    def check_aborted(self) -> None:
        if self.channel.ready():
            message, fds = self.channel.receive()
            for fd in fds:
                os.close(fd)
            if message == ("abort",):
                raise LogCleaningAbortedError(f"cleaning of {self.job.dir.name} was aborted")
            raise RuntimeError(f"unexpected message from the broker in a pass: {message!r}")

    def swap(self, cleaned: LogSegment, group: list[SegmentInfo]) -> bool:
        # The broker opens the cleaned files by name; whatever it answers, this process is done with them.
        cleaned.close()
        self.channel.send(("swap", cleaned.base_offset, [s.base_offset for s in group]))
        aborted = False
        while True:
            message, _ = self.channel.receive()
            if message == ("abort",):  # sent before the broker saw the swap request; the answer follows
                aborted = True
                continue
            if not (isinstance(message, tuple) and message[0] == "swapped"):
                raise RuntimeError(f"unexpected answer to a swap: {message!r}")
            if aborted and not message[1]:  # refused for the abort, not because the log moved
                raise LogCleaningAbortedError(f"cleaning of {self.job.dir.name} was aborted")
            return bool(message[1])

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the broker thread that started it goes, as a crash of the broker would."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # no prctl: the worker still exits when its channel closes
    if os.getppid() != parent_pid:
        sys.exit(0)


def run_pass(cleaner: Cleaner, channel: Channel, job: CleaningJob, fds: list[int]) -> None:
    """Run one pass and tell the broker how it ended."""
    target = WorkerTarget(channel, job, fds)
    try:
        end, stats = cleaner.clean(job, target)
        channel.send(("done", end, stats))
    except LogCleaningAbortedError as exc:
        channel.send(("aborted", str(exc)))
    except (KafkaStorageError, OSError) as exc:
        channel.send(("stopped", f"{type(exc).__name__}: {exc}"))
    except ChannelClosedError:
        raise
    except Exception as exc:
        channel.send(("failed", "".join(traceback.format_exception_only(type(exc), exc)).strip(),
                      traceback.format_exc()))
    finally:
        target.close()


def serve(channel: Channel) -> int:
    """Take CleanerConfig, then passes, until told to exit or the channel closes."""
    cleaner: Cleaner | None = None
    while True:
        try:
            message, fds = channel.receive()
        except ChannelClosedError:
            return 0
        kind = message[0] if isinstance(message, tuple) else None
        if kind == "config" and isinstance(message[1], CleanerConfig):
            # A throttled pass waits for the broker's next message rather than sleeping: an abort ends the wait.
            throttler = Throttler(message[1].max_io_bytes_per_second, sleep=lambda secs: channel.ready(secs))
            cleaner = Cleaner(message[1], throttler=throttler)
        elif kind == "clean" and cleaner is not None:
            try:
                run_pass(cleaner, channel, message[1], fds)
            except ChannelClosedError:
                return 0
        elif kind == "exit":
            return 0
        else:
            for fd in fds:
                os.close(fd)
            channel.send(("failed", f"unexpected message {message!r}", ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.log.cleaner_worker",
        description="A log cleaner worker process. The broker starts one per log.cleaner.threads and talks to it "
                    "over the socket whose descriptor it passes; it is not started by hand.")
    parser.add_argument("--fd", type=int, required=True, help="descriptor of the worker's end of the socket pair")
    parser.add_argument("--parent-pid", type=int, required=True, help="the broker's process id")
    args = parser.parse_args(argv)
    # Ctrl-C in a terminal, or a stop of the whole process group, reaches the worker too: the broker stops its
    # workers itself, after aborting their passes (the worker still dies with the broker).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent(args.parent_pid)
    channel = Channel(socket.socket(fileno=args.fd))
    try:
        return serve(channel)
    finally:
        channel.close()


if __name__ == "__main__":
    sys.exit(main())
