"""Produce and fetch throughput over each listener type of one broker: PLAINTEXT against SSL (and SASL_*).

Starts one standalone broker with a listener per protocol (certificates from a throwaway CA), then for each
protocol times kcat producing N messages of SIZE bytes to a topic of its own (librdkafka's batching, acks=all) and
kcat consuming one shared topic from the beginning (the same bytes for every protocol: PLAINTEXT fetches go out
with sendfile, TLS ones are read with preadv and encrypted in 1 MiB writes). Prints MB/s and the ratio to
PLAINTEXT, the best of ``--repeat`` runs.

``--protocols PLAINTEXT,SASL_PLAINTEXT,SSL,SASL_SSL`` adds SASL listeners; kcat logs in with SCRAM-SHA-512 as a user written
to the broker's credential file before it starts.

``--profile fetch`` (or ``produce``) runs the broker in this process instead and prints cProfile's top functions
of its event loop while kcat consumes (or produces) over SSL.

    .venv/bin/python -m bench.tls_throughput [--messages 300000] [--size 1000] [--repeat 3]
        [--protocols PLAINTEXT,SSL,SASL_SSL] [--profile fetch|produce]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from infra.deployment.certificates import CertificateAuthority
from tests.support import BrokerProcess
from tests.support.clients import create_topic
from tests.support.in_process_broker import InProcessBroker
from tests.support.ports import free_port
from tests.support.sasl import seed_users

MB = 1_000_000
SHARED_TOPIC = "tls-bench-fetch"
BENCH_USER = ("bench", "bench-secret")


def write_messages(path: Path, messages: int, size: int) -> None:
    """``messages`` lines of ``size`` bytes (the newline included), kcat's -l input."""
    line = (b"m" * (size - 1)) + b"\n"
    with open(path, "wb") as out:
        block = line * 10_000
        for _ in range(messages // 10_000):
            out.write(block)
        out.write(line * (messages % 10_000))


def broker_settings(protocols: list[str], ports: dict[str, int], work_dir: Path) -> dict[str, str]:
    ca = CertificateAuthority(work_dir / "ca")
    broker = ca.issue("broker")
    listeners = ",".join(f"{protocol}://127.0.0.1:{ports[protocol]}" for protocol in protocols)
    return {"listeners": listeners, "ssl.keystore.location": str(broker.bundle),
            "ssl.truststore.location": str(ca.cert_path), "socket.request.max.bytes": str(200 * MB)}


def kcat_security(protocol: str, ca_file: Path, args: argparse.Namespace) -> list[str]:
    settings: dict[str, str] = {}
    if protocol in ("SSL", "SASL_SSL"):
        settings.update({"security.protocol": protocol.lower(), "ssl.ca.location": str(ca_file)})
    if protocol.startswith("SASL_"):
        settings.update({"security.protocol": protocol.lower(), "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": BENCH_USER[0],
                         "sasl.password": BENCH_USER[1]})
    return [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]


def timed(command: list[str], **options: object) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    completed = subprocess.run(command, check=True, **options)  # type: ignore[call-overload]
    return time.perf_counter() - started, completed


def consume_command(bootstrap: str, security: list[str], messages: int) -> list[str]:
    # One output byte per message keeps the pipe out of the measurement; -c stops at the count.
    return ["kcat", "-b", bootstrap, *security, "-C", "-t", SHARED_TOPIC, "-o", "beginning", "-c", str(messages),
            "-q", "-f", ".", "-X", "fetch.wait.max.ms=10", "-X", "fetch.max.bytes=52428800",
            "-X", "fetch.message.max.bytes=8388608", "-X", "queued.max.messages.kbytes=262144"]


def measure(protocols: list[str], args: argparse.Namespace, work_dir: Path) -> None:
    payload = work_dir / "messages.txt"
    write_messages(payload, args.messages, args.size)
    ports = {protocol: free_port() for protocol in protocols}
    settings = broker_settings(protocols, ports, work_dir)
    ca_file = work_dir / "ca" / "ca.pem"
    plaintext_port = ports.get("PLAINTEXT") or free_port()
    if "PLAINTEXT" not in protocols:
        settings["listeners"] += f",PLAINTEXT://127.0.0.1:{plaintext_port}"
    broker = BrokerProcess(work_dir / "logs", port=plaintext_port, log_path=work_dir / "broker.log",
                           overrides=settings)
    megabytes = args.messages * (args.size - 1) / MB
    produce: dict[str, float] = {}
    fetch: dict[str, float] = {}
    seed_users(broker.log_dir, dict([BENCH_USER]))
    with broker:
        create_topic(broker.bootstrap, SHARED_TOPIC, 1)
        subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", SHARED_TOPIC, "-l", str(payload)], check=True)
        for run in range(args.repeat):
            for protocol in protocols:
                bootstrap = f"127.0.0.1:{ports[protocol]}"
                security = kcat_security(protocol, ca_file, args)
                topic = f"tls-bench-{protocol.lower()}-{run}"
                create_topic(broker.bootstrap, topic, 1)
                seconds, _ = timed(["kcat", "-b", bootstrap, *security, "-P", "-t", topic, "-l", str(payload)])
                produce[protocol] = min(produce.get(protocol, float("inf")), seconds)
                seconds, consumed = timed(consume_command(bootstrap, security, args.messages), stdout=subprocess.PIPE)
                if len(consumed.stdout) != args.messages:
                    raise SystemExit(f"{protocol}: kcat read {len(consumed.stdout)} of {args.messages} messages")
                fetch[protocol] = min(fetch.get(protocol, float("inf")), seconds)
    print(f"kcat over each listener, {args.messages:,} messages of {args.size} bytes ({megabytes:.0f} MB), one "
          f"partition, best of {args.repeat}; broker and kcat share this machine")
    for name, results in (("produce", produce), ("fetch", fetch)):
        base = results.get("PLAINTEXT")
        for protocol in protocols:
            rate = megabytes / results[protocol]
            ratio = f"  {base / results[protocol]:.2f}x PLAINTEXT" if base else ""
            print(f"  {name:<8} {protocol:<14} {rate:>8.1f} MB/s  ({results[protocol]:.2f} s){ratio}")


def profile(args: argparse.Namespace, work_dir: Path) -> None:
    """cProfile of the broker's event loop while kcat fetches everything (or produces it) over SSL."""
    payload = work_dir / "messages.txt"
    write_messages(payload, args.messages, args.size)
    ssl_port = free_port()
    settings = broker_settings(["SSL"], {"SSL": ssl_port}, work_dir)
    settings["listeners"] = f"PLAINTEXT://127.0.0.1:0,{settings['listeners']}"
    with InProcessBroker(work_dir / "logs", settings) as broker:
        bootstrap = f"127.0.0.1:{broker.port}"
        create_topic(bootstrap, SHARED_TOPIC, 1)
        security = kcat_security("SSL", work_dir / "ca" / "ca.pem", args)
        produce = ["kcat", "-b", f"127.0.0.1:{ssl_port}", *security, "-P", "-t", SHARED_TOPIC, "-l", str(payload)]
        if args.profile == "fetch":
            subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", SHARED_TOPIC, "-l", str(payload)], check=True)
        profiler = cProfile.Profile()
        broker.loop.call_soon_threadsafe(profiler.enable)
        if args.profile == "fetch":
            seconds, _ = timed(consume_command(f"127.0.0.1:{ssl_port}", security, args.messages),
                               stdout=subprocess.PIPE)
        else:
            seconds, _ = timed(produce)
        broker.loop.call_soon_threadsafe(profiler.disable)
        time.sleep(0.2)
    print(f"SSL {args.profile} of {args.messages:,} messages in {seconds:.2f} s with the broker profiled "
          f"(in this process: slower than a broker process)")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1000, help="bytes per message, delimiter included")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--protocols", default="PLAINTEXT,SSL",
                        help="comma-separated listener types to compare (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)")
    parser.add_argument("--profile", choices=("fetch", "produce"),
                        help="profile the broker's SSL fetch (or produce) path instead")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed afterwards)")
    args = parser.parse_args()
    if shutil.which("kcat") is None:
        raise SystemExit("kcat is not installed: run `make setup`")
    protocols = [p.strip().upper() for p in args.protocols.split(",") if p.strip()]
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as tmp:
        work_dir = args.dir or Path(tmp)
        work_dir.mkdir(parents=True, exist_ok=True)
        if args.profile:
            profile(args, work_dir)
        else:
            measure(protocols, args, work_dir)


if __name__ == "__main__":
    main()
