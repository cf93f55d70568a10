"""Schema registry benchmark: requests per second for registration and for `GET /schemas/ids/{id}`.

Starts ZooKeeper and two `python -m schemas.registry` processes on one chroot, then, with --concurrency
requests in flight from one aiohttp client:
  - registration: POST /subjects/{s}/versions of --schemas distinct schemas on instance A
    (each a new id: a ZooKeeper counter update and a multi-op, plus the subject's version);
  - registration again of the same schemas (what a serializer does at start: answered with the id);
  - uncached GET /schemas/ids/{id}: each id read once on instance B, which has never read it
    (one ZooKeeper read per request);
  - cached GET /schemas/ids/{id}: --reads reads of the same ids on instance B (served from memory).
With --data-dir the registries run standalone on a local directory instead of ZooKeeper. --basic turns on
authentication.method=BASIC (the client logs in as a user whose password is stored PBKDF2-hashed: the hash runs
once, later requests hit the verified-login cache), --https serves HTTPS from a local CA.

    .venv/bin/python -m bench.registry_bench [--schemas 2000] [--reads 20000] [--concurrency 16] [--basic] [--https]
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

import ssl

import aiohttp

from pipeline.zk.server import ZooKeeperServer
from tests.support.http_security import http_security_files
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


async def measure(first: str, second: str, schemas: int, reads: int, concurrency: int,
                  login: tuple[str, str] | None = None, tls: ssl.SSLContext | None = None) -> dict[str, float]:
    headers = {"Content-Type": CONTENT_TYPE}
    ids: list[int] = [0] * schemas
    auth = aiohttp.BasicAuth(*login) if login else None
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=tls if tls is not None else True)
    async with aiohttp.ClientSession(headers=headers, connector=connector, auth=auth) as http:
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
    parser.add_argument("--basic", action="store_true", help="authentication.method=BASIC, the client logged in")
    parser.add_argument("--https", action="store_true", help="HTTPS listeners (a local CA's certificate)")
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
        secured = http_security_files(base / "security")
        login = secured.logins["admin"] if args.basic else None
        settings = {"authentication.method": "BASIC", "authentication.users.file": secured.users_file} \
            if args.basic else {}
        if args.https:
            settings["ssl.keystore.location"] = secured.server.bundle
        extra = tuple(option for name, value in settings.items() for option in ("--set", f"{name}={value}"))
        ca_file = secured.ca_file if args.https else None
        first, second = (stack.enter_context(RegistryProcess(base / f"{name}.log", **where, extra_args=extra,
                                                             auth=login, ca_file=ca_file)) for name in "ab")
        results = asyncio.run(measure(first.url, second.url, args.schemas, args.reads, args.concurrency, login,
                                      first.context))
    security = " and ".join(name for name, on in (("BASIC", args.basic), ("HTTPS", args.https)) if on) or "none"
    print(f"schema registry on {backend}, {args.concurrency} requests in flight, one client process, "
          f"security: {security}")
    print(f"  registration (new id)          {results['register']:10,.0f} requests/s  ({args.schemas} schemas)")
    print(f"  registration (already there)   {results['reregister']:10,.0f} requests/s  ({args.schemas} schemas)")
    print(f"  GET /schemas/ids/{{id}} uncached {results['get_uncached']:10,.0f} requests/s  ({args.schemas} ids)")
    print(f"  GET /schemas/ids/{{id}} cached   {results['get_cached']:10,.0f} requests/s  ({args.reads} reads)")


if __name__ == "__main__":
    main()
