"""Where the group coordinator keeps groups and their committed offsets: ZooKeeper, or the standalone log dir.

In a cluster (ZkGroupStore) offsets live where Kafka 0.8.1 kept OffsetCommit v0's and where the paper's
consumers keep theirs, ``/consumers/<group>/offsets/<topic>/<partition>``, so both kinds of group are one
namespace for every tool; the coordinator's record of a broker-coordinated group (members, generation,
assignments) is ``/consumers/<group>/metadata``. Every write is a ZooKeeper transaction conditional on that
record's version, so a broker that still believes it coordinates a group after the group moved cannot
write over the new coordinator (it gets GroupFenced and answers NOT_COORDINATOR).

A standalone broker (FileGroupStore) keeps the same records in an append-only file of JSON lines in its
log dir, replayed at start-up and rewritten compactly when mostly superseded.

Transactional offset commits (TxnOffsetCommit) are stored as pending, per group and producer id
(``/consumers/<group>/txn_offsets/<producer id>`` in ZooKeeper), before they are acknowledged; the transaction's
marker makes them committed offsets or drops them, in one write. As in Kafka, where the later of the two commit
records in ``__consumer_offsets`` wins, a pending offset replaces a committed one only if it was written after
it: ZooKeeper's zxids order the writes in a cluster, a sequence number in the file does standalone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError

from pipeline.durable_file import fsync_dir, write_atomically
from pipeline.error_text import describe_error
from pipeline.printable import printable
from pipeline.zk import layout
from pipeline.zk.client import BoundedZk

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
NO_VERSION = -1


@dataclass(frozen=True)
class CommittedOffset:
    """A committed offset with what Kafka keeps beside it (OffsetAndMetadata)."""

    offset: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None


@dataclass(frozen=True)
class PendingTxnOffsets:
    """One producer's transactional offset commits in one group, waiting for its transaction's marker (Kafka's
    pendingTransactionalOffsetCommits): the producer epoch, the ``__consumer_offsets`` partition whose marker
    completes them, the offsets, and each offset's place in the order of the store's writes."""

    producer_epoch: int
    partition_index: int
    offsets: dict[TopicPartition, CommittedOffset]
    order: dict[TopicPartition, int]


class GroupStoreError(Exception):
    """The store did not answer or failed (retriable: clients get COORDINATOR_NOT_AVAILABLE)."""


class StaleProducerEpoch(Exception):
    """A transactional commit under an older producer epoch than the producer's pending commits hold (a zombie)."""


class GroupFenced(GroupStoreError):
    """The group's stored record changed under this coordinator: another broker coordinates it now."""


class GroupStore(Protocol):
    """Durable groups and offsets; every write names the version of the group's record it was based on."""

    async def load(self, group_id: str) -> tuple[dict[str, Any] | None, int]:
        """The group's stored record and its version; (None, NO_VERSION) when there is none."""

    async def store_group(self, group_id: str, record: dict[str, Any], expected_version: int) -> int:
        """Replace the record (create it when ``expected_version`` is NO_VERSION); its new version."""

    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset],
                             expected_version: int) -> None: ...

    async def fetch_offsets(self, group_id: str,
                            partitions: Iterable[TopicPartition] | None) -> dict[TopicPartition, CommittedOffset]:
        """The committed offsets of ``partitions`` (all of the group's when None); missing ones are left out."""

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition], expected_version: int) -> None: ...

    async def delete_group(self, group_id: str, expected_version: int) -> None:
        """Remove the group's record and every offset it committed."""

    async def group_ids(self) -> list[str]:
        """Every group with a stored record."""

    async def add_pending(self, group_id: str, producer_id: int, producer_epoch: int, partition_index: int,
                          offsets: dict[TopicPartition, CommittedOffset], expected_version: int) -> None:
        """Merge ``offsets`` into the producer's pending transactional commits of the group (later ones win)."""

    async def pending_offsets(self, group_id: str) -> dict[int, PendingTxnOffsets]:
        """The group's pending transactional commits by producer id."""

    async def pending_groups(self, producer_id: int, wanted: Callable[[str], bool]) -> list[str]:
        """The groups holding pending transactional commits of ``producer_id``, among those ``wanted`` accepts
        (a cheap test on the group id, made before the store is asked about the group)."""

    async def complete_pending(self, group_id: str, producer_id: int, commit: bool,
                               expected_version: int) -> dict[TopicPartition, CommittedOffset] | None:
        """Commit (``commit``) or drop the producer's pending commits of the group in one write; the offsets that
        became committed (those not superseded by a later commit), None when nothing was pending."""


# -- ZooKeeper ---------------------------------------------------------------------------------------

class ZkGroupStore:
    """Groups and offsets under /consumers in the cluster's ZooKeeper."""

    def __init__(self, zk: BoundedZk, timeout_s: float) -> None:
        self._zk = zk
        self._timeout_s = timeout_s
        # Offset znodes known to exist, so a commit knows whether to set or create each one.
        self._existing: set[str] = set()
        # Per group: commits waiting for the transaction in flight to finish, and whether one is in flight.
        self._queued: dict[str, list[tuple[dict[TopicPartition, CommittedOffset], int, asyncio.Future]]] = {}
        self._writing: set[str] = set()

    async def _call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._zk.call(operation, *args, timeout_s=self._timeout_s, **kwargs)
        except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError):
            raise
        except KazooException as exc:
            raise GroupStoreError(f"ZooKeeper {operation} failed: {describe_error(exc)}") from None

    async def _gather(self, requests: list) -> list[Any]:
        try:
            return await asyncio.gather(*(self._zk.wait_async(r, self._timeout_s) for r in requests),
                                        return_exceptions=True)
        except KazooException as exc:
            raise GroupStoreError(f"ZooKeeper failed: {describe_error(exc)}") from None

    async def _commit(self, ops: list[tuple[str, tuple]]) -> list[Any]:
        """Run (operation, args) as one transaction; the list of per-operation results."""
        transaction = self._zk.client.transaction()
        for operation, args in ops:
            getattr(transaction, operation)(*args)
        try:
            return await self._zk.wait_async(transaction.commit_async(), self._timeout_s)
        except KazooException as exc:
            raise GroupStoreError(f"ZooKeeper transaction failed: {describe_error(exc)}") from None

    async def load(self, group_id: str) -> tuple[dict[str, Any] | None, int]:
        try:
            data, stat = await self._call("get", layout.group_metadata_path(group_id))
        except NoNodeError:
            return None, NO_VERSION
        try:
            return json.loads(data.decode()), stat.version
        except ValueError:
            log.warning("group %s: unreadable record in %s; starting it afresh", printable(group_id),
                        printable(layout.group_metadata_path(group_id)))
            return None, stat.version

    async def store_group(self, group_id: str, record: dict[str, Any], expected_version: int) -> int:
        path = layout.group_metadata_path(group_id)
        data = layout.encode(record)
        try:
            if expected_version == NO_VERSION:
                await self._call("create", path, data, makepath=True)
                return 0
            return (await self._call("set", path, data, version=expected_version)).version
        except (NodeExistsError, BadVersionError, NoNodeError):
            raise GroupFenced(f"group {printable(group_id)}'s record changed under this coordinator") from None

    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset],
                             expected_version: int) -> None:
        """Commits of one group made while its previous transaction is in flight go together in the next one
        (group commit: one ZooKeeper round trip for many OffsetCommit requests), later offsets winning."""
        future = asyncio.get_running_loop().create_future()
        self._queued.setdefault(group_id, []).append((offsets, expected_version, future))
        if group_id not in self._writing:
            self._writing.add(group_id)
            asyncio.ensure_future(self._write_queued(group_id))
        await future

    async def _write_queued(self, group_id: str) -> None:
        try:
            while self._queued.get(group_id):
                queued = self._queued.pop(group_id)
                version = queued[0][1]
                batch = [entry for entry in queued if entry[1] == version]
                later = [entry for entry in queued if entry[1] != version]
                if later:
                    self._queued[group_id] = later + self._queued.get(group_id, [])
                merged: dict[TopicPartition, CommittedOffset] = {}
                for offsets, _, _ in batch:
                    merged.update(offsets)
                try:
                    await self._write_offsets(group_id, merged, version)
                    outcome: Exception | None = None
                except Exception as exc:  # every waiting commit fails with it (none is left waiting for ever)
                    outcome = exc
                for _, _, future in batch:
                    if future.done():
                        continue
                    if outcome is None:
                        future.set_result(None)
                    else:
                        future.set_exception(outcome)
        finally:
            self._writing.discard(group_id)

    async def _write_offsets(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset],
                             expected_version: int) -> None:
        metadata_path = layout.group_metadata_path(group_id)
        paths = {tp: layout.offset_path(group_id, *tp) for tp in offsets}
        for topic in {t for t, _ in offsets}:
            parent = layout.offsets_path(group_id, topic)
            if parent not in self._existing:
                await self._call("ensure_path", parent)
                self._existing.add(parent)
        for _ in range(3):
            ops: list[tuple[str, tuple]] = [("check", (metadata_path, expected_version))]
            for tp, committed in offsets.items():
                data = layout.offset_value(layout.OffsetValue(committed.offset, committed.metadata,
                                                              committed.expire_timestamp))
                path = paths[tp]
                ops.append(("set_data", (path, data)) if path in self._existing else ("create", (path, data)))
            results = await self._commit(ops)
            failure = _transaction_failure(results)
            if failure is None:
                self._existing.update(paths.values())
                return
            index, error = failure
            if index == 0:
                raise GroupFenced(f"group {printable(group_id)}'s record changed under this coordinator")
            path = ops[index][1][0]
            if isinstance(error, NodeExistsError):
                self._existing.add(path)
            elif isinstance(error, NoNodeError):
                self._existing.discard(path)
            else:
                raise GroupStoreError(f"committing offsets of group {printable(group_id)} failed: {error!r}")
        raise GroupStoreError(f"committing offsets of group {printable(group_id)}: offsets kept changing")

    async def fetch_offsets(self, group_id: str,
                            partitions: Iterable[TopicPartition] | None) -> dict[TopicPartition, CommittedOffset]:
        client = self._zk.client
        if partitions is None:
            try:
                topics = await self._call("get_children", f"{layout.group_path(group_id)}/offsets")
            except NoNodeError:
                return {}
            listed = await self._gather([client.get_children_async(layout.offsets_path(group_id, t)) for t in topics])
            wanted = [(topic, int(p)) for topic, children in zip(topics, listed)
                      if not isinstance(children, Exception) for p in children if p.isascii() and p.isdigit()]
        else:
            wanted = list(partitions)
        results = await self._gather([client.get_async(layout.offset_path(group_id, *tp)) for tp in wanted])
        found: dict[TopicPartition, CommittedOffset] = {}
        for tp, result in zip(wanted, results):
            if isinstance(result, NoNodeError):
                continue
            if isinstance(result, Exception):
                raise GroupStoreError(f"reading offsets of group {printable(group_id)} failed: {result!r}")
            data, stat = result
            try:
                value = layout.parse_offset_value(data)
            except ValueError:
                log.warning("group %s: unreadable offset in %s; ignored", printable(group_id),
                            printable(layout.offset_path(group_id, *tp)))
                continue
            self._existing.add(layout.offset_path(group_id, *tp))
            found[tp] = CommittedOffset(value.offset, value.metadata, stat.mtime, value.expire_timestamp)
        return found

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition], expected_version: int) -> None:
        ops: list[tuple[str, tuple]] = [("check", (layout.group_metadata_path(group_id), expected_version))]
        paths = [layout.offset_path(group_id, *tp) for tp in partitions]
        ops += [("delete", (path,)) for path in paths]
        failure = _transaction_failure(await self._commit(ops))
        if failure is not None and failure[0] == 0:
            raise GroupFenced(f"group {printable(group_id)}'s record changed under this coordinator")
        if failure is not None and not isinstance(failure[1], NoNodeError):
            raise GroupStoreError(f"deleting offsets of group {printable(group_id)} failed: {failure[1]!r}")
        self._existing.difference_update(paths)

    async def delete_group(self, group_id: str, expected_version: int) -> None:
        root = layout.group_path(group_id)
        nodes = await self._tree(root)
        ops: list[tuple[str, tuple]] = []
        if expected_version != NO_VERSION:
            ops.append(("check", (layout.group_metadata_path(group_id), expected_version)))
        ops += [("delete", (path,)) for path in reversed(nodes)]
        failure = _transaction_failure(await self._commit(ops))
        if failure is not None:
            if expected_version != NO_VERSION and failure[0] == 0:
                raise GroupFenced(f"group {printable(group_id)}'s record changed under this coordinator")
            raise GroupStoreError(f"deleting group {printable(group_id)} failed: {failure[1]!r}")
        self._existing = {p for p in self._existing if not p.startswith(root + "/")}

    async def _tree(self, root: str) -> list[str]:
        """``root`` and every znode below it, parents before children."""
        try:
            await self._call("exists", root)
        except NoNodeError:
            return []
        nodes, level = [root], [root]
        while level:
            children = await self._gather([self._zk.client.get_children_async(p) for p in level])
            level = [f"{parent}/{child}" for parent, names in zip(level, children)
                     if not isinstance(names, Exception) for child in names]
            nodes += level
        return nodes

    async def group_ids(self) -> list[str]:
        try:
            groups = await self._call("get_children", layout.CONSUMERS)
        except NoNodeError:
            return []
        found = await self._gather([self._zk.client.exists_async(layout.group_metadata_path(g)) for g in groups])
        return sorted(g for g, stat in zip(groups, found) if stat is not None and not isinstance(stat, Exception))


    # -- transactional offsets ---------------------------------------------------------------------

    async def add_pending(self, group_id: str, producer_id: int, producer_epoch: int, partition_index: int,
                          offsets: dict[TopicPartition, CommittedOffset], expected_version: int) -> None:
        path = layout.txn_offset_path(group_id, producer_id)
        parent = layout.txn_offsets_path(group_id)
        if parent not in self._existing:
            await self._call("ensure_path", parent)
            self._existing.add(parent)
        for _ in range(3):
            try:
                data, stat = await self._call("get", path)
                pending = _parse_pending(json.loads(data.decode()), stat.mzxid)
            except NoNodeError:
                stat, pending = None, None
            _check_epoch(group_id, producer_id, producer_epoch, pending)
            # The partitions written now take this write's zxid (None in the record: its node's mzxid).
            order: dict[TopicPartition, int | None] = {} if pending is None else dict(pending.order)
            merged = {} if pending is None else dict(pending.offsets)
            merged.update(offsets)
            order.update({tp: None for tp in offsets})
            record = layout.encode(_pending_record(producer_epoch, partition_index, merged, order))
            ops: list[tuple[str, tuple]] = [("check", (layout.group_metadata_path(group_id), expected_version))]
            ops.append(("create", (path, record)) if stat is None else ("set_data", (path, record, stat.version)))
            if await self._pending_write(group_id, ops, "storing"):
                return
        raise GroupStoreError(f"transactional offsets of group {printable(group_id)} kept changing")

    async def pending_offsets(self, group_id: str) -> dict[int, PendingTxnOffsets]:
        try:
            producers = await self._call("get_children", layout.txn_offsets_path(group_id))
        except NoNodeError:
            return {}
        producers = [p for p in producers if p.isascii() and p.isdigit()]
        results = await self._gather([self._zk.client.get_async(layout.txn_offset_path(group_id, int(p)))
                                      for p in producers])
        found: dict[int, PendingTxnOffsets] = {}
        for producer, result in zip(producers, results):
            if isinstance(result, NoNodeError):
                continue
            if isinstance(result, Exception):
                raise GroupStoreError(f"reading transactional offsets of group {printable(group_id)} failed: "
                                      f"{result!r}")
            found[int(producer)] = _parse_pending(json.loads(result[0].decode()), result[1].mzxid)
        return found

    async def pending_groups(self, producer_id: int, wanted: Callable[[str], bool]) -> list[str]:
        try:
            groups = [g for g in await self._call("get_children", layout.CONSUMERS) if wanted(g)]
        except NoNodeError:
            return []
        found = await self._gather([self._zk.client.exists_async(layout.txn_offset_path(g, producer_id))
                                    for g in groups])
        for result in found:
            if isinstance(result, Exception):
                raise GroupStoreError(f"looking for transactional offsets failed: {result!r}")
        return [g for g, stat in zip(groups, found) if stat is not None]

    async def complete_pending(self, group_id: str, producer_id: int, commit: bool,
                               expected_version: int) -> dict[TopicPartition, CommittedOffset] | None:
        path = layout.txn_offset_path(group_id, producer_id)
        for _ in range(3):
            try:
                data, stat = await self._call("get", path)
            except NoNodeError:
                return None
            pending = _parse_pending(json.loads(data.decode()), stat.mzxid)
            ops: list[tuple[str, tuple]] = [("check", (layout.group_metadata_path(group_id), expected_version))]
            written = await self._winning_offsets(group_id, pending, ops) if commit else {}
            ops.append(("delete", (path, stat.version)))
            if await self._pending_write(group_id, ops, "completing"):
                self._existing.update(layout.offset_path(group_id, *tp) for tp in written)
                return written
        raise GroupStoreError(f"transactional offsets of group {printable(group_id)} kept changing")

    async def _pending_write(self, group_id: str, ops: list[tuple[str, tuple]], doing: str) -> bool:
        """Run a transaction on the pending offsets whose first operation checks the group's record: whether it
        committed (False: a node changed under it, read and try again); GroupFenced when the record changed."""
        failure = _transaction_failure(await self._commit(ops))
        if failure is None:
            return True
        if failure[0] == 0:
            raise GroupFenced(f"group {printable(group_id)}'s record changed under this coordinator")
        if not isinstance(failure[1], (NodeExistsError, NoNodeError, BadVersionError)):
            raise GroupStoreError(f"{doing} transactional offsets of group {printable(group_id)} failed: "
                                  f"{failure[1]!r}")
        return False

    async def _winning_offsets(self, group_id: str, pending: PendingTxnOffsets,
                               ops: list[tuple[str, tuple]]) -> dict[TopicPartition, CommittedOffset]:
        """Add to ``ops`` the writes of the pending offsets no later commit superseded; those offsets."""
        for topic in {t for t, _ in pending.offsets}:
            parent = layout.offsets_path(group_id, topic)
            if parent not in self._existing:
                await self._call("ensure_path", parent)
                self._existing.add(parent)
        wanted = list(pending.offsets)
        current = await self._gather([self._zk.client.exists_async(layout.offset_path(group_id, *tp)) for tp in wanted])
        written = {}
        for tp, stat in zip(wanted, current):
            if isinstance(stat, Exception):
                raise GroupStoreError(f"reading offsets of group {printable(group_id)} failed: {stat!r}")
            if stat is not None and stat.mzxid > pending.order[tp]:
                continue
            committed = pending.offsets[tp]
            value = layout.offset_value(layout.OffsetValue(committed.offset, committed.metadata, None))
            path = layout.offset_path(group_id, *tp)
            ops.append(("create", (path, value)) if stat is None else ("set_data", (path, value, stat.version)))
            written[tp] = committed
        return written


def _check_epoch(group_id: str, producer_id: int, producer_epoch: int, pending: PendingTxnOffsets | None) -> None:
    if pending is not None and pending.producer_epoch > producer_epoch:
        raise StaleProducerEpoch(f"producer {producer_id} epoch {producer_epoch} commits offsets of group "
                                 f"{printable(group_id)} pending under epoch {pending.producer_epoch}")


def _pending_record(producer_epoch: int, partition_index: int, offsets: dict[TopicPartition, CommittedOffset],
                    order: dict[TopicPartition, int | None]) -> dict[str, Any]:
    return {"version": 1, "producer_epoch": producer_epoch, "partition_index": partition_index, "offsets": [
        {"topic": t, "partition": p, "offset": c.offset, "metadata": c.metadata, "commit_timestamp": c.commit_timestamp,
         "order": order.get((t, p))} for (t, p), c in offsets.items()]}


def _parse_pending(record: dict[str, Any], default_order: int) -> PendingTxnOffsets:
    """A pending record; offsets without an order take ``default_order`` (the write that stored the record)."""
    offsets, order = {}, {}
    for entry in record["offsets"]:
        tp = (entry["topic"], int(entry["partition"]))
        offsets[tp] = CommittedOffset(int(entry["offset"]), entry.get("metadata") or "", int(entry["commit_timestamp"]))
        order[tp] = default_order if entry.get("order") is None else int(entry["order"])
    return PendingTxnOffsets(int(record["producer_epoch"]), int(record["partition_index"]), offsets, order)


def _transaction_failure(results: list[Any]) -> tuple[int, Exception] | None:
    """The operation that made a transaction fail (index, error), or None when it committed."""
    for index, result in enumerate(results):
        if isinstance(result, Exception) and type(result).__name__ != "RolledBackError":
            return index, result
    return None


# -- the standalone broker's log dir -------------------------------------------------------------------

class FileGroupStore:
    """Groups and offsets of a standalone broker in ``<log dir>/__consumer_offsets.jsonl`` (owner-only).

    Each change is one appended JSON line, written before the request is answered (a killed broker loses
    nothing written; the page cache holds it until ``flush``, as for partition logs). At start-up the file is
    replayed (a torn last line from a crash is dropped). The store keeps the latest line of every group record
    and committed offset, and so the live size, as it goes: once the file is four times larger than that, it is
    rewritten from those lines on a thread off the event loop, while appends go on to the old file and are
    carried over to the new one. A commit costs the same whatever the number of groups.
    """

    FILE_NAME = "__consumer_offsets.jsonl"
    MIN_COMPACT_BYTES = 1 << 20

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / self.FILE_NAME
        self._records: dict[str, tuple[dict[str, Any], int]] = {}
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._pending: dict[str, dict[int, PendingTxnOffsets]] = {}
        # Each committed offset's place in the order of writes (``seq``: the last one given out), so a pending
        # transactional offset replaces only a committed offset written before it.
        self._offset_seq: dict[tuple[str, str, int], int] = {}
        self._seq = 0
        # The latest line of each live entry -- a group's record, one of its offsets, or one producer's pending
        # transactional offsets (group, producer id) -- and their total size.
        self._lines: dict[str | tuple, bytes] = {}
        self._live_bytes = 0
        self._replay()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(self._fd, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._dirty = False
        self._dir_dirty = False
        # The scheduler's flush runs on its own thread; a rewrite replaces the file descriptor under it.
        self._fd_lock = threading.Lock()
        # While a rewrite runs: the lines appended since its snapshot, carried over to the new file at its end.
        self._carried: list[bytes] | None = None
        self._compaction: asyncio.Future | None = None
        self.compactions = 0
        self._closed = False

    def _replay(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        good = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                self._apply(json.loads(line), line)
            except (ValueError, KeyError, TypeError):
                log.warning("%s: unreadable entry at byte %d; the rest is dropped", self.path, good)
                break
            good += len(line)
        if good < len(data):
            with open(self.path, "r+b") as file:
                file.truncate(good)

    def _apply(self, entry: dict[str, Any], line: bytes) -> None:
        group = entry["group"]
        kind = entry["type"]
        if kind == "group":
            self._records[group] = (entry["record"], int(entry["version"]))
            self._keep(group, line)
        elif kind == "offset":
            key = (entry["topic"], int(entry["partition"]))
            if entry.get("offset") is None:
                self._offsets.get(group, {}).pop(key, None)
                self._offset_seq.pop((group, *key), None)
                self._keep((group, *key), None)
            else:
                self._offsets.setdefault(group, {})[key] = CommittedOffset(
                    int(entry["offset"]), entry.get("metadata", ""), int(entry["commit_timestamp"]),
                    entry.get("expire_timestamp"))
                seq = int(entry.get("seq", 0))
                self._offset_seq[(group, *key)] = seq
                self._seq = max(self._seq, seq)
                self._keep((group, *key), line)
        elif kind == "txn_offsets":
            pending = _parse_pending(entry, 0)
            self._pending.setdefault(group, {})[int(entry["producer_id"])] = pending
            self._seq = max(self._seq, *pending.order.values(), 0)
            self._keep((group, int(entry["producer_id"])), line)
        elif kind == "txn_end":
            # The offsets the marker made committed, each kept as its own offset line.
            for committed in entry["offsets"]:
                offset_entry = {"type": "offset", "group": group, **committed}
                self._apply(offset_entry, json.dumps(offset_entry, separators=(",", ":")).encode() + b"\n")
            self._pending.get(group, {}).pop(int(entry["producer_id"]), None)
            self._keep((group, int(entry["producer_id"])), None)
        elif kind == "delete":
            self._records.pop(group, None)
            self._keep(group, None)
            for topic, partition in self._offsets.pop(group, {}):
                self._offset_seq.pop((group, topic, partition), None)
                self._keep((group, topic, partition), None)
            for producer_id in self._pending.pop(group, {}):
                self._keep((group, producer_id), None)
        else:
            raise ValueError(f"unknown entry type {kind!r}")

    def _keep(self, key: str | tuple, line: bytes | None) -> None:
        """Make ``line`` the live line of ``key`` (None: the key has none any more), keeping the live size."""
        old = self._lines.pop(key, None) if line is None else self._lines.get(key)
        if old is not None:
            self._live_bytes -= len(old)
        if line is not None:
            self._lines[key] = line
            self._live_bytes += len(line)

    def _append(self, entries: list[dict[str, Any]]) -> None:
        lines = [json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in entries]
        for entry, line in zip(entries, lines):
            self._apply(entry, line)
        data = b"".join(lines)
        with self._fd_lock:
            os.write(self._fd, data)
        self._size += len(data)
        self._dirty = True
        if self._carried is not None:
            self._carried.append(data)
        elif self._size > self.MIN_COMPACT_BYTES and self._size > 4 * self._live_bytes:
            self._start_compaction()

    def _start_compaction(self) -> None:
        """Rewrite the file from the live lines on a thread; appends meanwhile are carried over at its end."""
        snapshot = list(self._lines.values())
        self._carried = []
        self._compaction = asyncio.get_running_loop().run_in_executor(None, self._write_snapshot, snapshot)
        self._compaction.add_done_callback(self._finish_compaction)

    def _write_snapshot(self, lines: list[bytes]) -> tuple[Path, int]:
        """(On a thread.) The live lines in a new file beside the store, synced; (its path, its size)."""
        tmp = self.path.with_name(self.path.name + ".compacting")
        data = b"".join(lines)
        write_atomically(tmp, data, mode=0o600)
        return tmp, len(data)

    def _finish_compaction(self, done: asyncio.Future) -> None:
        """(On the loop.) Add the lines appended meanwhile to the new file and put it in the old one's place."""
        carried, self._carried, self._compaction = self._carried or [], None, None
        if done.cancelled():
            return
        if self._closed:
            if done.exception() is None:
                done.result()[0].unlink(missing_ok=True)
            return
        error = done.exception()
        if error is not None:
            log.error("%s: compacting failed (%s: %s); appending to the old file goes on", self.path,
                      type(error).__name__, error)
            return
        tmp, size = done.result()
        fd = os.open(tmp, os.O_WRONLY | os.O_APPEND)
        try:
            tail = b"".join(carried)
            os.write(fd, tail)
            os.replace(tmp, self.path)
        except OSError as exc:
            os.close(fd)
            log.error("%s: compacting failed (%s: %s); appending to the old file goes on", self.path,
                      type(exc).__name__, exc)
            return
        with self._fd_lock:
            os.close(self._fd)
            self._fd = fd
        self._size = size + len(tail)
        # The carried lines and the rename reach the disk with the next flush.
        self._dirty = self._dir_dirty = True
        self.compactions += 1

    def _check(self, group_id: str, expected_version: int) -> None:
        version = self._records.get(group_id, (None, NO_VERSION))[1]
        if version != expected_version:
            raise GroupFenced(f"group {printable(group_id)}'s record is at version {version}, not {expected_version}")

    async def load(self, group_id: str) -> tuple[dict[str, Any] | None, int]:
        return self._records.get(group_id, (None, NO_VERSION))

    async def store_group(self, group_id: str, record: dict[str, Any], expected_version: int) -> int:
        self._check(group_id, expected_version)
        self._append([{"type": "group", "group": group_id, "record": record, "version": expected_version + 1}])
        return expected_version + 1

    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset],
                             expected_version: int) -> None:
        self._check(group_id, expected_version)
        self._append([_offset_entry(group_id, tp, c, self._seq + 1) for tp, c in offsets.items()])

    async def add_pending(self, group_id: str, producer_id: int, producer_epoch: int, partition_index: int,
                          offsets: dict[TopicPartition, CommittedOffset], expected_version: int) -> None:
        self._check(group_id, expected_version)
        pending = self._pending.get(group_id, {}).get(producer_id)
        _check_epoch(group_id, producer_id, producer_epoch, pending)
        merged = {} if pending is None else dict(pending.offsets)
        order: dict[TopicPartition, int | None] = {} if pending is None else dict(pending.order)
        merged.update(offsets)
        order.update({tp: self._seq + 1 for tp in offsets})
        self._append([{"type": "txn_offsets", "group": group_id, "producer_id": producer_id,
                       **_pending_record(producer_epoch, partition_index, merged, order)}])

    async def pending_offsets(self, group_id: str) -> dict[int, PendingTxnOffsets]:
        return dict(self._pending.get(group_id, {}))

    async def pending_groups(self, producer_id: int, wanted: Callable[[str], bool]) -> list[str]:
        return [g for g, producers in self._pending.items() if producer_id in producers and wanted(g)]

    async def complete_pending(self, group_id: str, producer_id: int, commit: bool,
                               expected_version: int) -> dict[TopicPartition, CommittedOffset] | None:
        pending = self._pending.get(group_id, {}).get(producer_id)
        if pending is None:
            return None
        self._check(group_id, expected_version)
        written = {tp: c for tp, c in pending.offsets.items()
                   if commit and self._offset_seq.get((group_id, *tp), -1) < pending.order[tp]}
        seq = self._seq + 1
        self._append([{"type": "txn_end", "group": group_id, "producer_id": producer_id, "commit": commit,
                       "offsets": [{k: v for k, v in _offset_entry(group_id, tp, c, seq).items()
                                    if k not in ("type", "group")} for tp, c in written.items()]}])
        return written

    async def fetch_offsets(self, group_id: str,
                            partitions: Iterable[TopicPartition] | None) -> dict[TopicPartition, CommittedOffset]:
        offsets = self._offsets.get(group_id, {})
        if partitions is None:
            return dict(offsets)
        return {tp: offsets[tp] for tp in partitions if tp in offsets}

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition], expected_version: int) -> None:
        self._check(group_id, expected_version)
        self._append([{"type": "offset", "group": group_id, "topic": t, "partition": p, "offset": None}
                      for t, p in partitions])

    async def delete_group(self, group_id: str, expected_version: int) -> None:
        self._check(group_id, expected_version)
        self._append([{"type": "delete", "group": group_id}])

    async def group_ids(self) -> list[str]:
        return sorted(self._records)

    async def wait_compacted(self) -> None:
        """Wait for a rewrite in progress, if any (for tests and shutdown)."""
        compaction = self._compaction
        if compaction is not None:
            await asyncio.wait([compaction])

    def flush(self) -> None:
        """fsync what was appended since the last flush (the scheduler's flusher calls this), and the directory
        after a rewrite."""
        with self._fd_lock:
            if self._dirty:
                self._dirty = False
                os.fsync(self._fd)
            if self._dir_dirty:
                self._dir_dirty = False
                fsync_dir(self.path.parent)

    def close(self) -> None:
        """Sync and close the file; a rewrite still running is abandoned (the file as it is holds everything)."""
        self.flush()
        with self._fd_lock:
            self._closed = True
            os.close(self._fd)


def _offset_entry(group_id: str, tp: TopicPartition, committed: CommittedOffset, seq: int) -> dict[str, Any]:
    return {"type": "offset", "group": group_id, "topic": tp[0], "partition": tp[1], "offset": committed.offset,
            "metadata": committed.metadata, "commit_timestamp": committed.commit_timestamp,
            "expire_timestamp": committed.expire_timestamp, "seq": seq}
