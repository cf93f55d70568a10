"""FileTransactionStore: conditional writes fence a stale version, records survive a reopen (a torn last line is
dropped), and the file is rewritten once mostly superseded. (ZkTransactionStore: tests/integration/broker.)"""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

from broker.coordinator.transaction_store import (
    NO_VERSION,
    FileTransactionStore,
    TransactionFenced,
    transaction_path,
)


def run(coroutine):
    return asyncio.run(coroutine)


def test_writes_are_conditional_on_the_version(tmp_path) -> None:
    store = FileTransactionStore(tmp_path)
    assert run(store.store("t", {"state": "Empty"}, NO_VERSION)) == 0
    with pytest.raises(TransactionFenced):
        run(store.store("t", {"state": "Ongoing"}, NO_VERSION))
    assert run(store.store("t", {"state": "Ongoing"}, 0)) == 1
    with pytest.raises(TransactionFenced):
        run(store.store("t", {"state": "Empty"}, 0))
    with pytest.raises(TransactionFenced):
        run(store.delete("t", 0))
    assert run(store.load("t")) == ({"state": "Ongoing"}, 1)
    store.close()
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600


def test_a_reopened_store_has_every_record_but_a_torn_last_line(tmp_path) -> None:
    store = FileTransactionStore(tmp_path)
    run(store.store("a", {"n": 1}, NO_VERSION))
    run(store.store("b", {"n": 2}, NO_VERSION))
    run(store.store("a", {"n": 3}, 0))
    run(store.delete("b", 0))
    store.close()
    with open(store.path, "ab") as file:
        file.write(b'{"id":"c","record":{"n"')
    reopened = FileTransactionStore(tmp_path)
    assert run(reopened.load_all()) == {"a": ({"n": 3}, 1)}
    assert run(reopened.load("b")) == (None, NO_VERSION)
    assert run(reopened.store("c", {"n": 4}, NO_VERSION)) == 0
    reopened.close()
    assert run(FileTransactionStore(tmp_path).load_all()) == {"a": ({"n": 3}, 1), "c": ({"n": 4}, 0)}


def test_the_file_is_rewritten_from_the_live_records(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(FileTransactionStore, "MIN_COMPACT_BYTES", 4096)
    store = FileTransactionStore(tmp_path)
    version = NO_VERSION
    for n in range(400):
        version = run(store.store("only", {"n": n}, version))
    run(store.store("other", {"n": -1}, NO_VERSION))
    assert store.compactions >= 1
    assert os.path.getsize(store.path) < 4 * 4096
    store.close()
    assert run(FileTransactionStore(tmp_path).load_all()) == {"only": ({"n": 399}, 399), "other": ({"n": -1}, 0)}


def test_every_id_is_one_znode_name() -> None:
    assert transaction_path("mirror/eu-1") == "/transactions/mirror%2Feu-1"
    assert transaction_path("..") == "/transactions/%2E%2E"
    assert transaction_path("a.b c") == "/transactions/a%2Eb%20c"
