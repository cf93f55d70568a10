"""Fixtures the broker's integration tests share."""

from __future__ import annotations

import pytest

from pipeline.zk.client import connect


@pytest.fixture
def zk(zk_connect):
    """A kazoo client of the session's ZooKeeper, for the coordinators' stores."""
    client = connect(zk_connect)
    yield client
    client.stop()
    client.close()
