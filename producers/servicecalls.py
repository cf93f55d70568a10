"""Outcomes of backend calls: latency and status of one call to an endpoint of `producers.catalog.ENDPOINTS`.

A call that succeeds takes a log-normal time around the endpoint's median (most calls close to it, a
long right tail). On top of that a few calls hit a stall: a garbage-collection pause on the callee
(exponential, tens of milliseconds) or a lost packet that waits for TCP's minimum retransmission
timeout (200 ms on Linux). A call still running at the endpoint's timeout is abandoned by the caller:
status 504 with the latency exactly the timeout. Separately, a small share of calls fail on the callee
(500, or 503 when it sheds load), quickly, and some are refused as bad requests (400, 404).
"""

from __future__ import annotations

import math
import random

from producers.catalog import Endpoint

GC_PAUSE_SHARE = 0.01
"""Share of calls that meet a garbage-collection pause on the callee."""
GC_PAUSE_MEAN_MS = 40.0
"""Mean of such a pause (exponentially distributed)."""
RETRANSMIT_SHARE = 0.002
"""Share of calls that lose a packet and wait for a TCP retransmission."""
RETRANSMIT_MS = 200.0
"""Linux's minimum retransmission timeout."""


def call_outcome(rng: random.Random, endpoint: Endpoint) -> tuple[float, int]:
    """(latency in ms rounded to microseconds, HTTP status) of one call to `endpoint`."""
    r = rng.random()
    if r < endpoint.error_rate:
        status = 503 if r < endpoint.error_rate * 0.3 else 500
        return round(endpoint.median_ms * 0.4 * math.exp(endpoint.sigma * rng.gauss(0.0, 1.0)), 3), status
    if r < endpoint.error_rate + endpoint.client_error_rate:
        status = 404 if rng.random() < 0.7 else 400
        return round(endpoint.median_ms * 0.5 * math.exp(endpoint.sigma * rng.gauss(0.0, 1.0)), 3), status
    latency = endpoint.median_ms * math.exp(endpoint.sigma * rng.gauss(0.0, 1.0))
    stall = rng.random()
    if stall < GC_PAUSE_SHARE:
        latency += rng.expovariate(1.0 / GC_PAUSE_MEAN_MS)
    elif stall < GC_PAUSE_SHARE + RETRANSMIT_SHARE:
        latency += RETRANSMIT_MS
    if latency >= endpoint.timeout_ms:
        return endpoint.timeout_ms, 504
    return round(latency, 3), 200
