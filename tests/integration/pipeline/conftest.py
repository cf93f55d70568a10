"""Fixtures the client integration tests share."""

from __future__ import annotations

import pytest

from tests.support.fault_proxy import FaultProxy
from tests.support.ports import free_port


@pytest.fixture
def proxied_broker(broker_factory):
    """A broker on 127.0.0.2 advertising 127.0.0.1, where a FaultProxy listens on the same port.

    The proxy takes its port on 127.0.0.1 first and the broker is started behind it: a port free on 127.0.0.2
    is not necessarily free on 127.0.0.1."""
    for _ in range(50):
        port = free_port("127.0.0.2")
        try:
            proxy = FaultProxy("127.0.0.1", "127.0.0.2", port)
        except OSError:
            continue
        break
    else:
        pytest.fail("no port free on both 127.0.0.1 and 127.0.0.2")
    with proxy:
        broker = broker_factory(overrides={"advertised.host.name": "127.0.0.1"}, port=port, host="127.0.0.2")
        yield broker, proxy
