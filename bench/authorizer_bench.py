"""The authorizer's cost: one check, and a whole Produce request handled with and without it.

A standalone broker runs in this process (InProcessBroker) with ``authorizer.class.name`` set and ACLs for
``--acls`` other topics (literal) and a hundred prefixes, plus the one granting WRITE on the benchmark topic.
Measured on the broker's event loop:

- ``AclAuthorizer.authorize`` per call: a cached decision, and a decision computed (cache cleared each time);
- ``KafkaApis.handle`` of a Produce v8 request (acks=1, one topic, ``--partitions`` partitions of 1 KiB), with
  the authorizer and with ``authorizer`` set to None (as without authorizer.class.name), alternating rounds.

    .venv/bin/python -m bench.authorizer_bench [--requests 20000] [--acls 10000] [--partitions 10]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Callable

from broker.server.session import Session
from pipeline.client.admin import AdminClient
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import encode_request
from pipeline.security.acl import AclOperation, PatternType, ResourceType
from pipeline.security.principal import ANONYMOUS
from tests.support.acls import AUTHORIZER, acl, administrator, seed_log_dir
from tests.support.in_process_broker import InProcessBroker

TOPIC = "bench-authorized"


def produce_frame(partitions: int) -> memoryview:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=b"x" * 1024, headers=[])
    records = bytes(builder.build())
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": p, "records": records}
                                                               for p in range(partitions)]}]}
    return memoryview(encode_request(ApiKey.PRODUCE, 8, 1, "bench", body)[4:])


def per_call_ns(function: Callable[[], object], calls: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(calls):
        function()
    return (time.perf_counter_ns() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--acls", type=int, default=10000)
    parser.add_argument("--partitions", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        bindings = administrator() + acl(ResourceType.TOPIC, TOPIC, AclOperation.WRITE)
        for i in range(args.acls):
            bindings += acl(ResourceType.TOPIC, f"other-{i}", AclOperation.READ, principal=f"User:u{i % 50}")
        for i in range(100):
            bindings += acl(ResourceType.TOPIC, f"prefix-{i}-", AclOperation.WRITE, pattern=PatternType.PREFIXED)
        seed_log_dir(logs, bindings)
        with InProcessBroker(logs, {**AUTHORIZER, "num.partitions": args.partitions}) as broker:
            with AdminClient(f"127.0.0.1:{broker.port}") as admin:
                admin.create_topics(TOPIC, args.partitions, 1)
            results = asyncio.run_coroutine_threadsafe(measure(broker, args), broker.loop).result(600)
    for line in results:
        print(line)


async def measure(broker: InProcessBroker, args: argparse.Namespace) -> list[str]:
    apis = broker.server.apis
    authorizer = broker.server.authorizer
    assert apis is not None and authorizer is not None
    session = Session("127.0.0.1:50000", principal=ANONYMOUS)
    check = lambda: authorizer.authorize(session, AclOperation.WRITE, ResourceType.TOPIC, TOPIC)  # noqa: E731
    calls = 200_000
    assert check()
    cached = per_call_ns(check, calls)

    def uncached() -> None:
        authorizer._decisions.clear()
        check()
    computed = per_call_ns(uncached, calls // 10)
    apis.session = session
    per_topic = per_call_ns(lambda: apis.authorize(AclOperation.WRITE, ResourceType.TOPIC, TOPIC), calls)
    frame = produce_frame(args.partitions)
    timings: dict[str, list[float]] = {"with": [], "without": []}
    rounds = 40
    order = [("without", None), ("with", authorizer)]
    for _ in range(rounds):
        order.reverse()  # neither setting always runs second (on a warmer cache, a longer log)
        for label, installed in order:
            apis.authorizer = installed
            timings[label].append(per_call_ns(lambda: apis.handle(frame, session), args.requests // rounds))
    apis.authorizer = authorizer
    # The fastest round of each: the machine's other load only ever adds time.
    with_ns, without_ns = min(timings["with"]), min(timings["without"])
    return [f"ACLs: {len(authorizer.cache)}",
            f"authorize, cached decision: {cached:.0f} ns",
            f"authorize, decision computed: {computed:.0f} ns",
            f"KafkaApis.authorize (Produce's check per topic): {per_topic:.0f} ns",
            f"Produce v8 ({args.partitions} x 1 KiB, acks=1) handled without authorizer: {without_ns / 1000:.1f} us",
            f"Produce v8 ({args.partitions} x 1 KiB, acks=1) handled with authorizer:    {with_ns / 1000:.1f} us",
            f"added per request: {(with_ns - without_ns) / 1000:.2f} us ({(with_ns / without_ns - 1) * 100:.1f}%)"]


if __name__ == "__main__":
    main()
