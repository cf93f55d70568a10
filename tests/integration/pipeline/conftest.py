"""Fixtures the client integration tests share."""

from __future__ import annotations

import pytest

from tests.support.fault_proxy import FaultProxy
from tests.support.ports import consecutive_free_ports


@pytest.fixture
def proxied_broker(broker_factory):
    """A broker on 127.0.0.2 advertising 127.0.0.1, where a FaultProxy listens on the same port.

    The proxy takes its port on 127.0.0.1 first, from below the ephemeral range, and the broker is started
    behind it: a port free on 127.0.0.2 is not necessarily free on 127.0.0.1 (another test's connection or
    listener may hold it there)."""
    for _ in range(50):
        port = consecutive_free_ports(1, "127.0.0.2")
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
