"""The broker's end of a log cleaner worker process (see cleaner_worker): started by its cleaner thread at
the first pass, it runs that thread's passes while the thread only waits, swaps the cleaned segments in
and watches for an abort.

A worker that dies (killed, out of memory) ends its pass as a failure: its ``.cleaned`` files are removed
and the next pass starts a new worker.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

from broker.log.cleaner_channel import Channel, ChannelClosedError
from broker.log.errors import KafkaStorageError
from broker.log.log import Log, now_ms
from broker.log.cleaner import CleanerConfig, CleanerStats, CleaningJob
from broker.log.log_cleaner_manager import LogCleanerManager, LogCleaningAbortedError, LogToClean
from broker.log.log_segment import CLEANED_SUFFIX, LogSegment

log = logging.getLogger(__name__)

# How often the waiting thread looks for an abort of its pass.
ABORT_CHECK_SECS = 0.02
# How long an aborted or stopping worker may take to answer before it is killed.
WORKER_ANSWER_SECS = 10.0


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# The directory holding the broker package, for a worker started from any working directory.
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])


def _worker_environment() -> dict[str, str]:
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = _SOURCE_ROOT if not path else f"{_SOURCE_ROOT}{os.pathsep}{path}"
    return env


class CleanerWorkerError(Exception):
    """A pass failed in the worker (a corrupt batch, a bug) or the worker died; the log is left uncleaned."""


class CleanerProcess:
    """One cleaner thread's worker process and the conversation with it; used by that thread only (the
    worker is tied to the thread that started it: it is killed when that thread ends)."""

    def __init__(self, config: CleanerConfig, manager: LogCleanerManager) -> None:
        self.config = config
        self.manager = manager
        self._process: subprocess.Popen[bytes] | None = None
        self._channel: Channel | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def resource_usage(self) -> tuple[float, int] | None:
        """(CPU seconds, resident bytes) of the running worker from /proc, or None when there is none; callable
        from any thread (the metrics)."""
        pid = self.pid
        if pid is None:
            return None
        try:
            with open(f"/proc/{pid}/stat") as stat, open(f"/proc/{pid}/statm") as statm:
                fields = stat.read().rsplit(")", 1)[1].split()
                resident_pages = int(statm.read().split()[1])
        except (OSError, IndexError, ValueError):
            return None
        # After the command: state is field 3, utime and stime fields 14 and 15 (proc(5)).
        cpu = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        return cpu, resident_pages * _PAGE_SIZE

    def _start(self) -> Channel:
        if self._channel is not None and self._process is not None and self._process.poll() is None:
            return self._channel
        self._discard()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "broker.log.cleaner_worker", "--fd", str(theirs.fileno()),
                 "--parent-pid", str(os.getpid())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=_worker_environment())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._channel = Channel(ours)
        self._channel.send(("config", self.config))
        log.info("log cleaner worker %d started", self._process.pid)
        return self._channel

    def clean(self, to_clean: LogToClean) -> tuple[int, CleanerStats]:
        """Run one pass in the worker; raises LogCleaningAbortedError (aborted, or the log moved),
        KafkaStorageError (the log's files went away) or CleanerWorkerError (failed, or the worker died)."""
        channel = self._start()
        log_ = to_clean.log
        tp = to_clean.topic_partition
        segments = log_.segments_below(to_clean.first_uncleanable_offset)
        fds: list[int] = []
        try:
            for segment in segments:
                fds.append(log_.open_segment_for_reading(segment))
            channel.send(("clean", CleaningJob.of(to_clean, segments)), fds)
        except ChannelClosedError:
            self._worker_died(log_)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            outcome = self._converse(channel, log_, tp, {s.base_offset: s for s in segments})
        except ChannelClosedError:
            self._worker_died(log_)
        except BaseException:
            # The conversation is in an unknown state: the worker goes, with its files.
            self._discard()
            self._remove_cleaned_files(log_)
            raise
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _converse(self, channel: Channel, log_: Log, tp: tuple[str, int],
                  segments: dict[int, LogSegment]) -> tuple[int, CleanerStats] | Exception:
        """Wait for the worker's messages until the pass ends: its result, or the error it ended with."""
        aborted_at: float | None = None
        while True:
            if not channel.ready(ABORT_CHECK_SECS):
                if aborted_at is None:
                    try:
                        self.manager.check_cleaning_aborted(tp)
                    except LogCleaningAbortedError:
                        aborted_at = time.monotonic()
                        channel.send(("abort",))
                elif time.monotonic() - aborted_at > WORKER_ANSWER_SECS:
                    raise LogCleaningAbortedError(f"the cleaner worker did not stop its pass of {log_.dir.name}")
                continue
            message, fds = channel.receive()
            for fd in fds:
                os.close(fd)
            kind = message[0]
            if kind == "swap":
                swapped = aborted_at is None and self._swap(log_, message[1], message[2], segments)
                channel.send(("swapped", swapped))
            elif kind == "done":
                return message[1], message[2]
            elif kind == "aborted":
                return LogCleaningAbortedError(message[1])
            elif kind == "stopped":
                return KafkaStorageError(message[1])
            elif kind == "failed":
                log.debug("the cleaner worker's traceback:\n%s", message[2])
                return CleanerWorkerError(message[1])
            else:
                raise CleanerWorkerError(f"unexpected message from the cleaner worker: {message!r}")

    def _swap(self, log_: Log, base: int, group_bases: list[int], segments: dict[int, LogSegment]) -> bool:
        """Open the worker's complete .cleaned segment and swap it in for the group (False, its files
        removed, when the log moved or the files are not what the worker said)."""
        old = [segments.get(b) for b in group_bases]
        cleaned = LogSegment(log_.dir, base, log_.config, now_ms(), hold_indexes=False, suffix=CLEANED_SUFFIX)
        if any(s is None for s in old) or not cleaned.load_tail():
            cleaned.close()
            for path in cleaned.paths():
                path.unlink(missing_ok=True)
            return False
        return log_.replace_segments(cleaned, old, self.config.faults.pause)  # type: ignore[arg-type]

    def _worker_died(self, log_: Log) -> NoReturn:
        code = self._process.poll() if self._process is not None else None
        self._discard()
        self._remove_cleaned_files(log_)
        raise CleanerWorkerError(f"the cleaner worker exited (code {code}) during a pass over {log_.dir.name}")

    @staticmethod
    def _remove_cleaned_files(log_: Log) -> None:
        # Only a pass writes .cleaned files, and no other pass runs on this log.
        for path in log_.dir.glob(f"*{CLEANED_SUFFIX}"):
            path.unlink(missing_ok=True)

    def _discard(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            self._process = None

    def close(self) -> None:
        """Tell the worker to exit and wait for it (killed when it does not answer in time)."""
        if self._process is None:
            return
        try:
            if self._channel is not None:
                self._channel.send(("exit",))
            self._process.wait(WORKER_ANSWER_SECS)
        except (ChannelClosedError, subprocess.TimeoutExpired):
            pass
        self._discard()
