"""Fixtures the client integration tests share."""

from __future__ import annotations

import pytest

from tests.support.fault_proxy import FaultProxy
from tests.support.ports import free_port


@pytest.fixture
def proxied_broker(broker_factory):
    """A broker on 127.0.0.2 advertising 127.0.0.1, where a FaultProxy listens on the same port."""
    port = free_port("127.0.0.2")
    broker = broker_factory(overrides={"advertised.host.name": "127.0.0.1"}, port=port, host="127.0.0.2")
    with FaultProxy("127.0.0.1", "127.0.0.2", port) as proxy:
        yield broker, proxy
