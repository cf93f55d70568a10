"""Schema registry benchmark: requests per second for registration and for `GET /schemas/ids/{id}`.

Starts ZooKeeper and two `python -m schemas.registry` processes on one chroot, then, with --concurrency
requests in flight from one aiohttp client:
  - registration: POST /subjects/{s}/versions of --schemas distinct schemas on instance A
    (each a new id: a ZooKeeper counter update and a multi-op, plus the subject's version);
  - registration again of the same schemas (what a serializer does at start: answered with the id);
  - uncached GET /schemas/ids/{id}: each id read once on instance B, which has never read it
    (one ZooKeeper read per request);
  - cached GET /schemas/ids/{id}: --reads reads of the same ids on instance B (served from memory).
With --data-dir the registries run standalone on a local directory instead of ZooKeeper.

    .venv/bin/python -m bench.registry_bench [--schemas 2000] [--reads 20000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Awaitable, Callable

import aiohttp

from pipeline.zk.server import ZooKeeperServer
from tests.support.registry import CONTENT_TYPE, RegistryProcess


def schema(index: int) -> str:
    return json.dumps({"type": "record", "name": f"Event{index}", "namespace": "bench",
                       "fields": [{"name": "id", "type": "long"}, {"name": "payload", "type": "string"}]})


async def timed(count: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> float:
    """Requests per second of `count` calls of `one(i)` with `concurrency` in flight."""
    queue = iter(range(count))

    async def worker() -> None:
        for index in queue:
            await one(index)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.perf_counter() - started)


async def measure(first: str, second: str, schemas: int, reads: int, concurrency: int) -> dict[str, float]:
    headers = {"Content-Type": CONTENT_TYPE}
    ids: list[int] = [0] * schemas
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(limit=concurrency)) as http:
        async def register(index: int) -> None:
            async with http.post(f"{first}/subjects/bench-{index}-value/versions",
                                 json={"schema": schema(index)}) as response:
                if response.status != 200:
                    raise RuntimeError(f"registration answered {response.status}: {await response.text()}")
                ids[index] = (await response.json(content_type=None))["id"]

        async def read(index: int) -> None:
            async with http.get(f"{second}/schemas/ids/{ids[index % schemas]}") as response:
                if response.status != 200:
                    raise RuntimeError(f"GET answered {response.status}: {await response.text()}")
                await response.read()

        results = {"register": await timed(schemas, concurrency, register)}
        results["reregister"] = await timed(schemas, concurrency, register)
        results["get_uncached"] = await timed(schemas, concurrency, read)
        results["get_cached"] = await timed(reads, concurrency, read)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--data-dir", action="store_true", help="standalone registries on a local directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="registry-bench-") as temporary, ExitStack() as stack:
        base = Path(temporary)
        if args.data_dir:
            where = {"data_dir": base / "data"}
            backend = "directory"
        else:
            server = stack.enter_context(ZooKeeperServer(base / "zookeeper"))
            where = {"zookeeper": server.connect_string + "/registry-bench"}
            backend = "ZooKeeper"
        first = stack.enter_context(RegistryProcess(base / "a.log", **where))
        second = stack.enter_context(RegistryProcess(base / "b.log", **where))
        results = asyncio.run(measure(first.url, second.url, args.schemas, args.reads, args.concurrency))
    print(f"schema registry on {backend}, {args.concurrency} requests in flight, one client process")
    print(f"  registration (new id)          {results['register']:10,.0f} requests/s  ({args.schemas} schemas)")
    print(f"  registration (already there)   {results['reregister']:10,.0f} requests/s  ({args.schemas} schemas)")
    print(f"  GET /schemas/ids/{{id}} uncached {results['get_uncached']:10,.0f} requests/s  ({args.schemas} ids)")
    print(f"  GET /schemas/ids/{{id}} cached   {results['get_cached']:10,.0f} requests/s  ({args.reads} reads)")


if __name__ == "__main__":
    main()
