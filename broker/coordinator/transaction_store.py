"""Where the transaction coordinator keeps its TransactionMetadata: ZooKeeper in a cluster, the log dir standalone.

In a cluster (ZkTransactionStore) each transactional id is one znode, ``/transactions/<escaped id>`` under the
cluster's chroot, holding the JSON record of TransactionMetadata.to_record. Every write is conditional on the
znode's version, so a broker that still believes it coordinates an id after the id moved (or after another broker
loaded it and bumped its coordinator epoch) cannot write over the new coordinator: it gets TransactionFenced and
answers NOT_COORDINATOR. Kafka keeps this state in the ``__transaction_state`` topic; ZooKeeper gives the same
replicated, conditional writes for the few transitions of a transaction, as for the group coordinator's state.

A standalone broker (FileTransactionStore) appends one JSON line per write to
``<log dir>/__transaction_state.jsonl`` before the request is answered, replays it at start-up (a torn last line
is dropped), and rewrites it from the live records once it is four times their size.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from broker.coordinator.json_lines import replay_json_lines
from pipeline.durable_file import write_atomically
from pipeline.error_text import describe_error
from pipeline.printable import printable
from pipeline.zk.client import BoundedZk

log = logging.getLogger(__name__)

NO_VERSION = -1
TRANSACTIONS_PATH = "/transactions"
Stored = tuple[dict[str, Any], int]


class TransactionStoreError(Exception):
    """The store did not answer or failed (retriable: clients get COORDINATOR_NOT_AVAILABLE)."""


class TransactionFenced(TransactionStoreError):
    """The id's stored record changed under this coordinator: another broker coordinates it now."""


class TransactionStore(Protocol):
    """Durable transaction metadata, each write naming the version of the record it was based on."""

    async def load_all(self) -> dict[str, Stored]:
        """Every stored id with its record and version."""

    async def load(self, transactional_id: str) -> tuple[dict[str, Any] | None, int]:
        """The id's record and version; (None, NO_VERSION) when there is none."""

    async def store(self, transactional_id: str, record: dict[str, Any], expected_version: int) -> int:
        """Replace the record (create it when ``expected_version`` is NO_VERSION); its new version."""

    async def delete(self, transactional_id: str, expected_version: int) -> None: ...


def transaction_path(transactional_id: str) -> str:
    """The znode of an id: percent-escaped so any id is one path element ('.' too: '.' and '..' are not names)."""
    return f"{TRANSACTIONS_PATH}/{quote(transactional_id, safe='').replace('.', '%2E')}"


class ZkTransactionStore:
    """Transaction metadata under /transactions in the cluster's ZooKeeper."""

    def __init__(self, zk: BoundedZk, timeout_s: float) -> None:
        self._zk = zk
        self._timeout_s = timeout_s

    async def _call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._zk.call(operation, *args, timeout_s=self._timeout_s, **kwargs)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except KazooException as exc:
            raise TransactionStoreError(f"ZooKeeper {operation} failed: {describe_error(exc)}") from None

    async def load_all(self) -> dict[str, Stored]:
        try:
            children = await self._call("get_children", TRANSACTIONS_PATH)
        except NoNodeError:
            return {}
        ids = [unquote(child) for child in children]
        loaded = await asyncio.gather(*(self.load(transactional_id) for transactional_id in ids))
        return {transactional_id: (record, version) for transactional_id, (record, version) in zip(ids, loaded)
                if record is not None}

    async def load(self, transactional_id: str) -> tuple[dict[str, Any] | None, int]:
        path = transaction_path(transactional_id)
        try:
            data, stat = await self._call("get", path)
        except NoNodeError:
            return None, NO_VERSION
        try:
            return json.loads(data.decode()), stat.version
        except ValueError:
            log.warning("transactional id %s: unreadable record in %s; ignored", printable(transactional_id),
                        printable(path))
            return None, stat.version

    async def store(self, transactional_id: str, record: dict[str, Any], expected_version: int) -> int:
        path = transaction_path(transactional_id)
        data = json.dumps(record, separators=(",", ":")).encode()
        try:
            if expected_version == NO_VERSION:
                await self._call("create", path, data, makepath=True)
                return 0
            return (await self._call("set", path, data, version=expected_version)).version
        except (NodeExistsError, BadVersionError, NoNodeError):
            raise TransactionFenced(f"transactional id {printable(transactional_id)}'s record changed under this "
                                    "coordinator") from None

    async def delete(self, transactional_id: str, expected_version: int) -> None:
        try:
            await self._call("delete", transaction_path(transactional_id), version=expected_version)
        except (BadVersionError, NoNodeError):
            raise TransactionFenced(f"transactional id {printable(transactional_id)}'s record changed under this "
                                    "coordinator") from None


class FileTransactionStore:
    """Transaction metadata of a standalone broker in ``<log dir>/__transaction_state.jsonl`` (owner-only).

    Appends reach the page cache before the request is answered (a killed broker loses nothing written) and the
    disk at ``flush``, as partition logs do. The rewrite is synchronous: the live set is one short line per
    transactional id, and it happens once per ``MIN_COMPACT_BYTES`` appended at most.
    """

    FILE_NAME = "__transaction_state.jsonl"
    MIN_COMPACT_BYTES = 1 << 20

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / self.FILE_NAME
        self._records: dict[str, Stored] = {}
        self._lines: dict[str, bytes] = {}
        self._live_bytes = 0
        replay_json_lines(self.path, self._apply)
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(self._fd, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._dirty = False
        self.compactions = 0

    def _apply(self, entry: dict[str, Any], line: bytes) -> None:
        transactional_id = str(entry["id"])
        self._live_bytes -= len(self._lines.pop(transactional_id, b""))
        if entry.get("record") is None:
            self._records.pop(transactional_id, None)
        else:
            self._records[transactional_id] = (dict(entry["record"]), int(entry["version"]))
            self._lines[transactional_id] = line
            self._live_bytes += len(line)

    def _append(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")).encode() + b"\n"
        self._apply(entry, line)
        with self._lock:
            os.write(self._fd, line)
            self._size += len(line)
            self._dirty = True
            if self._size > self.MIN_COMPACT_BYTES and self._size > 4 * self._live_bytes:
                self._rewrite()

    def _rewrite(self) -> None:
        """(Under the lock.) Replace the file with the live lines."""
        data = b"".join(self._lines.values())
        write_atomically(self.path, data, mode=0o600)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._size = len(data)
        self._dirty = False
        self.compactions += 1

    def _check(self, transactional_id: str, expected_version: int) -> None:
        version = self._records.get(transactional_id, (None, NO_VERSION))[1]
        if version != expected_version:
            raise TransactionFenced(f"transactional id {printable(transactional_id)}'s record is at version "
                                    f"{version}, not {expected_version}")

    async def load_all(self) -> dict[str, Stored]:
        return dict(self._records)

    async def load(self, transactional_id: str) -> tuple[dict[str, Any] | None, int]:
        return self._records.get(transactional_id, (None, NO_VERSION))

    async def store(self, transactional_id: str, record: dict[str, Any], expected_version: int) -> int:
        self._check(transactional_id, expected_version)
        self._append({"id": transactional_id, "record": record, "version": expected_version + 1})
        return expected_version + 1

    async def delete(self, transactional_id: str, expected_version: int) -> None:
        self._check(transactional_id, expected_version)
        self._append({"id": transactional_id, "record": None})

    def flush(self) -> None:
        """fsync what was appended since the last flush (the scheduler calls this)."""
        with self._lock:
            if self._dirty:
                self._dirty = False
                os.fsync(self._fd)

    def close(self) -> None:
        self.flush()
        with self._lock:
            os.close(self._fd)
