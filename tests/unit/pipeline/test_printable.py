"""Client-supplied strings are escaped where the broker logs them: a group id, a client id (in member ids) or a
protocol name with a newline forged a log line of the client's making."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from broker.coordinator.group_store import FileGroupStore, GroupFenced
from pipeline.printable import printable
from pipeline.protocol.errors import ErrorCode

FORGED = "\n2026-01-01 00:00:00 WARNING broker.server: the admin password is hunter2"


@pytest.mark.parametrize("text, shown", [
    ("page-views.v1_2", "page-views.v1_2"),
    ("naïve groüp", "naïve groüp"),
    ("a" + FORGED, "a\\n2026-01-01 00:00:00 WARNING broker.server: the admin password is hunter2"),
    ("cr\rlf\r\n", "cr\\rlf\\r\\n"),
    ("\x1b[2Jgone", "\\x1b[2Jgone"),
    ("abc\u202edcba", "abc\\u202edcba"),
    ("line\u2028separator\x85", "line\\u2028separator\\x85"),
    ("back\\n", "back\\\\n"),  # a backslash is escaped too, so that an escape in the text cannot pass for ours
    (None, "None"),
])
def test_printable_escapes_what_would_break_or_disguise_a_line(text, shown):
    assert printable(text) == shown
    assert printable(text).isprintable()


def test_the_group_coordinator_logs_client_strings_escaped(tmp_path, caplog):
    group, client, protocol = "g" + FORGED, "client" + FORGED, "range" + FORGED

    async def scenario():
        coordinator = GroupCoordinator(FileGroupStore(tmp_path), GroupConfig(min_session_timeout_ms=100,
                                                                             initial_rebalance_delay_ms=0))
        joined = await coordinator.join_group(group, "", None, client, "/127.0.0.1", 300, 300, "consumer",
                                              [(protocol, b"")], require_known_member_id=False)
        assert joined["error_code"] == ErrorCode.NONE
        synced = await coordinator.sync_group(group, 1, joined["member_id"], None, {joined["member_id"]: b"a"})
        assert synced["error_code"] == ErrorCode.NONE
        left = await coordinator.leave_group(group, [(joined["member_id"], None)])
        assert left[0] == ErrorCode.NONE
        coordinator.shutdown()

    with caplog.at_level(logging.INFO, logger="broker.coordinator"):
        asyncio.run(scenario())
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) >= 4, lines  # rebalancing, formed, stable, member removed
    assert all("\n" not in line for line in lines), lines
    assert any(line.startswith("group g\\n2026-01-01") and "member client\\n2026-01-01" in line for line in lines)
    assert any("protocol range\\n2026-01-01" in line for line in lines)


def test_a_group_store_error_names_the_group_escaped(tmp_path):
    async def scenario():
        store = FileGroupStore(tmp_path)
        with pytest.raises(GroupFenced) as fenced:
            await store.store_group("g" + FORGED, {}, 7)
        return str(fenced.value)

    assert asyncio.run(scenario()).startswith("group g\\n2026-01-01 00:00:00 WARNING")
