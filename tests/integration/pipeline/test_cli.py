"""`python -m pipeline` end to end against a real broker: every subcommand run as a subprocess.

Data written by our CLI is read back with kafka-python, and data read by our CLI is written with kcat
or kafka-python, so each direction is checked against an independent client.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.partitioner.default import murmur2

from tests.support import REPO_ROOT, BrokerProcess, free_port
from tests.support.clients import by_partition, kafka_python_consume, run_kcat

EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


def cli(bootstrap: str | None, *args: str, input_bytes: bytes | None = None, timeout: float = 30.0,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m pipeline ARGS --bootstrap-server BOOTSTRAP``; never a traceback on stderr."""
    command = [sys.executable, "-m", "pipeline", *args]
    if bootstrap is not None:
        command += ["--bootstrap-server", bootstrap]
    run_env = {k: v for k, v in os.environ.items() if k != "PIPELINE_BOOTSTRAP_SERVER"}
    run_env.update(env or {})
    result = subprocess.run(command, input=input_bytes, capture_output=True, timeout=timeout, cwd=REPO_ROOT,
                            env=run_env, check=False)
    assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
    return result


def ok(result: subprocess.CompletedProcess) -> str:
    """stdout of a run that must have succeeded."""
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr.decode(errors='replace')}"
    return result.stdout.decode()


def failed(result: subprocess.CompletedProcess, exit_code: int, *fragments: str) -> str:
    """The one-line error of a run that must have failed with ``exit_code``."""
    err = result.stderr.decode()
    assert result.returncode == exit_code, f"exit {result.returncode}, wanted {exit_code}: {err}"
    error_lines = [line for line in err.splitlines() if "error:" in line]
    assert len(error_lines) == 1, err
    for fragment in fragments:
        assert fragment in error_lines[0], err
    return error_lines[0]


def produced_count(result: subprocess.CompletedProcess) -> int:
    match = re.search(r"produced (\d+) messages in [\d.]+ s \([\d,]+ msg/s\)", result.stderr.decode())
    assert match, result.stderr.decode()
    return int(match.group(1))


def test_topics_create_list_describe_delete(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    assert ok(cli(b, "topics", "create", "alpha", "--partitions", "3", "--config", "retention.ms=60000")) \
        == "Created topic alpha.\n"
    ok(cli(b, "topics", "create", "beta", "--partitions", "1", "--replication-factor", "1"))
    assert ok(cli(b, "topics", "list")).split() == ["alpha", "beta"]
    assert ok(cli(b, "topics", "describe", "alpha")).splitlines() == [
        "Topic: alpha\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000",
        "\tTopic: alpha\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: alpha\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: alpha\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0",
    ]
    everything = ok(cli(b, "topics", "describe"))
    assert [line for line in everything.splitlines() if line.startswith("Topic:")] == [
        "Topic: alpha\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000",
        "Topic: beta\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: "]
    assert ok(cli(b, "topics", "create", "alpha", "--partitions", "3", "--if-not-exists")) == \
        "Topic alpha already exists.\n"
    assert ok(cli(b, "topics", "delete", "alpha")) == "Deleted topic alpha.\n"
    assert ok(cli(b, "topics", "list")).split() == ["beta"]
    assert ok(cli(b, "topics", "delete", "alpha", "--if-exists")) == ""
    # The bootstrap address may come from the environment instead of the flag.
    assert ok(cli(None, "topics", "list", env={"PIPELINE_BOOTSTRAP_SERVER": b})).split() == ["beta"]


def test_refusals_and_unknown_topics_are_one_line_errors(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok(cli(b, "topics", "create", "here", "--partitions", "2"))
    failed(cli(b, "topics", "create", "here", "--partitions", "2"), EXIT_FAILED, "TOPIC_ALREADY_EXISTS", "'here'")
    failed(cli(b, "topics", "create", "wide", "--partitions", "1", "--replication-factor", "3"), EXIT_FAILED,
           "INVALID_REPLICATION_FACTOR")
    failed(cli(b, "topics", "create", "odd", "--partitions", "1", "--config", "no.such.config=1"), EXIT_FAILED,
           "INVALID_CONFIG")
    failed(cli(b, "topics", "create", "bad/name", "--partitions", "1"), EXIT_FAILED, "INVALID_TOPIC_EXCEPTION")
    missing = "topic 'nowhere' does not exist"
    failed(cli(b, "topics", "describe", "nowhere"), EXIT_FAILED, missing)
    failed(cli(b, "topics", "delete", "nowhere"), EXIT_FAILED, missing)
    failed(cli(b, "offsets", "nowhere"), EXIT_FAILED, missing)
    failed(cli(b, "consume", "nowhere", "--from-beginning"), EXIT_FAILED, missing)
    failed(cli(b, "produce", "nowhere", input_bytes=b"x\n"), EXIT_FAILED, missing)
    no_partition = "topic 'here' has no partition 5"
    failed(cli(b, "offsets", "here", "--partition", "5"), EXIT_FAILED, no_partition)
    failed(cli(b, "consume", "here", "--partition", "5"), EXIT_FAILED, no_partition)
    failed(cli(b, "produce", "here", "--partition", "5", input_bytes=b"x\n"), EXIT_FAILED, no_partition)
    assert ok(cli(b, "topics", "list")).split() == ["here"]


def test_topics_alter_adds_partitions(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok(cli(b, "topics", "create", "grows", "--partitions", "1"))
    assert ok(cli(b, "topics", "alter", "grows", "--partitions", "3")).strip() == "Topic grows now has 3 partitions."
    assert "PartitionCount: 3" in ok(cli(b, "topics", "describe", "grows"))
    failed(cli(b, "topics", "alter", "grows", "--partitions", "2"), EXIT_FAILED, "INVALID_PARTITIONS")
    failed(cli(b, "topics", "alter", "absent", "--partitions", "2"), EXIT_FAILED, "'absent'", "does not exist")


def test_unreachable_broker_exits_3(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    commands = [("topics", "list"), ("topics", "create", "t", "--partitions", "1"), ("topics", "describe"),
                ("topics", "delete", "t"), ("offsets", "t"), ("consume", "t", "--from-beginning"), ("produce", "t")]
    for args in commands:
        started = time.monotonic()
        line = failed(cli(nobody, *args, input_bytes=b"x\n"), EXIT_UNREACHABLE, f"cannot reach a broker at {nobody}")
        assert "Connection refused" in line
        assert time.monotonic() - started < 5


@pytest.mark.parametrize("args, fragment", [
    ((), "required: COMMAND"),
    (("topics", "create", "t"), "--partitions"),
    (("topics", "create", "t", "--partitions", "-1"), "must be at least 1"),
    (("topics", "launch"), "invalid choice"),
    (("produce", "t", "--acks", "7"), "--acks"),
    (("produce", "t", "--property", "parse.keys=true"), "unknown --property 'parse.keys'"),
    (("consume", "t", "--offset", "3"), "--offset needs --partition"),
    (("consume", "t", "--format", "yaml"), "invalid choice"),
    (("offsets", "t", "--time", "noon"), "--time"),
    (("topics", "list", "--bootstrap-server", "localhost"), "not host:port"),
])
def test_bad_arguments_exit_2(args: tuple[str, ...], fragment: str) -> None:
    # Nothing listens on this port: argument errors are reported before any connection is tried.
    nobody = None if "--bootstrap-server" in args else f"127.0.0.1:{free_port()}"
    failed(cli(nobody, *args, input_bytes=b"x\n"), EXIT_USAGE, fragment)


def test_produce_stdin_then_consume_from_the_beginning(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok(cli(b, "topics", "create", "lines", "--partitions", "2"))
    lines = [f"line {i}" for i in range(2000)]
    produced = cli(b, "produce", "lines", input_bytes="".join(f"{line}\n" for line in lines).encode())
    ok(produced)
    assert produced_count(produced) == 2000
    records = kafka_python_consume(b, "lines", [0, 1], expected=2000)
    assert sorted(r.value.decode() for r in records) == sorted(lines)
    assert all(r.key is None for r in records)
    out = ok(cli(b, "consume", "lines", "--from-beginning", "--max-messages", "2000"))
    assert sorted(out.splitlines()) == sorted(lines)
    idle_end = cli(b, "consume", "lines", "--from-beginning", "--timeout-ms", "500")
    assert "consumed 2000 messages" in idle_end.stderr.decode()
    # Each partition comes out in offset order.
    for partition, part_records in by_partition(records).items():
        expected = [r.value.decode() for r in sorted(part_records, key=lambda r: r.offset)]
        got = ok(cli(b, "consume", "lines", "--partition", str(partition), "--offset", "0",
                     "--max-messages", str(len(expected)))).splitlines()
        assert got == expected


def test_produce_file_with_keys_partitions_by_murmur2(broker: BrokerProcess, tmp_path: Path) -> None:
    b = broker.bootstrap
    ok(cli(b, "topics", "create", "keyed", "--partitions", "4"))
    source = tmp_path / "input.txt"
    source.write_text("".join(f"user-{i % 7}:payload {i}\n" for i in range(300)))
    result = cli(b, "produce", "keyed", "--file", str(source), "--key-separator", ":", "--sync", "--acks", "all")
    ok(result)
    assert produced_count(result) == 300
    out = ok(cli(b, "consume", "keyed", "--from-beginning", "--max-messages", "300", "--format", "json"))
    documents = [json.loads(line) for line in out.splitlines()]
    assert len(documents) == 300
    for doc in documents:
        assert doc["topic"] == "keyed"
        assert doc["partition"] == (murmur2(doc["key"].encode()) & 0x7FFFFFFF) % 4
        assert doc["value"].startswith("payload ") and int(doc["value"].split()[1]) % 7 == int(doc["key"][5:])
        assert isinstance(doc["timestamp"], int) and doc["timestamp"] > 0 and doc["headers"] == []
    for partition in range(4):
        in_partition = [d for d in documents if d["partition"] == partition]
        assert [d["offset"] for d in in_partition] == list(range(len(in_partition)))
        payloads = [int(d["value"].split()[1]) for d in in_partition]
        assert payloads == sorted(payloads)
    # Kafka's console-producer spelling of the same thing, read back with kafka-python.
    ok(cli(b, "produce", "keyed", "--property", "parse.key=true", "--property", "key.separator=|",
           input_bytes=b"alice|first\nbob|second\n"))
    records = kafka_python_consume(b, "keyed", range(4), expected=302)
    extra = {(r.key, r.value, r.partition) for r in records if r.key in (b"alice", b"bob")}
    assert extra == {(b"alice", b"first", (murmur2(b"alice") & 0x7FFFFFFF) % 4),
                     (b"bob", b"second", (murmur2(b"bob") & 0x7FFFFFFF) % 4)}
    # A line without the separator is an error naming the line.
    failed(cli(b, "produce", "keyed", "--key-separator", ":", input_bytes=b"a:1\nno separator\n"), EXIT_FAILED,
           "line number 2")


def test_produce_options_partition_compression_throughput(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok(cli(b, "topics", "create", "opts", "--partitions", "2"))
    for codec in ("gzip", "lz4", "zstd", "snappy"):
        ok(cli(b, "produce", "opts", "--partition", "1", "--compression-codec", codec, "--batch-size", "50",
               input_bytes="".join(f"{codec} {i}\n" for i in range(120)).encode()))
    assert ok(cli(b, "offsets", "opts")).splitlines() == ["opts:0:0", "opts:1:480"]
    records = kafka_python_consume(b, "opts", [1], expected=480)
    assert [r.value for r in records] == [f"{codec} {i}".encode() for codec in ("gzip", "lz4", "zstd", "snappy")
                                          for i in range(120)]
    started = time.monotonic()
    limited = cli(b, "produce", "opts", "--throughput", "200", "--acks", "0",
                  input_bytes=b"".join(b"%d\n" % i for i in range(100)))
    ok(limited)
    assert produced_count(limited) == 100
    assert time.monotonic() - started >= 0.45
    assert float(re.search(r"in ([\d.]+) s", limited.stderr.decode()).group(1)) >= 0.45


def test_consume_formats_and_start_offsets(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok(cli(b, "topics", "create", "fmt", "--partitions", "2"))
    run_kcat(["-b", b, "-P", "-t", "fmt", "-p", "0", "-K", ":"],
             input_bytes="".join(f"k{i}:v{i}\n" for i in range(20)).encode())
    run_kcat(["-b", b, "-P", "-t", "fmt", "-p", "1"], input_bytes=b"one\ntwo\n")
    assert ok(cli(b, "consume", "fmt", "--partition", "0", "--offset", "15", "--max-messages", "3",
                  "--format", "key-value", "--key-separator", "=")).splitlines() == ["k15=v15", "k16=v16", "k17=v17"]
    assert ok(cli(b, "consume", "fmt", "--partition", "0", "--offset", "18", "--max-messages", "2",
                  "--property", "print.key=true")).splitlines() == ["k18\tv18", "k19\tv19"]
    documents = [json.loads(line) for line in ok(cli(b, "consume", "fmt", "--partition", "1", "--offset", "earliest",
                                                     "--max-messages", "2", "--format", "json")).splitlines()]
    now_ms = time.time() * 1000
    assert [(d["topic"], d["partition"], d["offset"], d["key"], d["value"]) for d in documents] == [
        ("fmt", 1, 0, None, "one"), ("fmt", 1, 1, None, "two")]
    assert all(abs(d["timestamp"] - now_ms) < 600_000 for d in documents)
    assert ok(cli(b, "consume", "fmt", "--partition", "1", "--max-messages", "1", "--from-beginning",
                  "--format", "key-value")) == "null\tone\n"
    everything = ok(cli(b, "consume", "fmt", "--from-beginning", "--timeout-ms", "500")).splitlines()
    assert sorted(everything) == sorted([f"v{i}" for i in range(20)] + ["one", "two"])
    assert ok(cli(b, "consume", "fmt", "--timeout-ms", "300")) == ""
    failed(cli(b, "consume", "fmt", "--partition", "0", "--offset", "21"), EXIT_FAILED,
           "offset 21 is outside the log of fmt-0 (offsets 0 to 20)")


def test_consume_without_from_beginning_starts_at_the_end(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok(cli(b, "topics", "create", "tail", "--partitions", "1"))
    producer = KafkaProducer(bootstrap_servers=b, acks=1, linger_ms=0)
    consumer = subprocess.Popen([sys.executable, "-m", "pipeline", "consume", "tail", "--max-messages", "1",
                                 "--bootstrap-server", b], cwd=REPO_ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for i in range(5):
            producer.send("tail", f"old {i}".encode()).get(timeout=10)
        # The consumer positions itself at the end some time after it starts: keep adding new messages
        # until it has printed one; it must never print an old one.
        deadline = time.monotonic() + 20
        sent = 0
        while consumer.poll() is None:
            assert time.monotonic() < deadline, "the consumer printed nothing"
            producer.send("tail", f"new {sent}".encode()).get(timeout=10)
            sent += 1
            try:
                consumer.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                continue
        out, err = consumer.communicate(timeout=10)
    finally:
        producer.close()
        if consumer.poll() is None:
            consumer.kill()
            consumer.communicate()
    assert consumer.returncode == 0, err.decode()
    assert re.fullmatch(rb"new \d+\n", out), out
    assert b"consumed 1 messages" in err


def test_offsets_earliest_latest_and_by_time(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok(cli(b, "topics", "create", "times", "--partitions", "2"))
    producer = KafkaProducer(bootstrap_servers=b, acks=1, linger_ms=0)
    try:
        base = 1_600_000_000_000
        for i in range(10):
            producer.send("times", f"m{i}".encode(), partition=0, timestamp_ms=base + 1000 * i).get(timeout=10)
        producer.send("times", b"late", partition=1, timestamp_ms=base + 60_000).get(timeout=10)
    finally:
        producer.close()
    assert ok(cli(b, "offsets", "times")).splitlines() == ["times:0:10", "times:1:1"]
    assert ok(cli(b, "offsets", "times", "--time", "latest", "--partition", "0")) == "times:0:10\n"
    assert ok(cli(b, "offsets", "times", "--time", "earliest")).splitlines() == ["times:0:0", "times:1:0"]
    assert ok(cli(b, "offsets", "times", "--time", str(base + 4500))).splitlines() == ["times:0:5", "times:1:0"]
    assert ok(cli(b, "offsets", "times", "--time", str(base + 9000))).splitlines() == ["times:0:9", "times:1:0"]
    # No message that recent: the offset is left empty, as Kafka's GetOffsetShell prints it.
    assert ok(cli(b, "offsets", "times", "--time", str(base + 30_000))).splitlines() == ["times:0:", "times:1:0"]


def test_ctrl_c_stops_consume_with_a_summary(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok(cli(b, "topics", "create", "waiting", "--partitions", "1"))
    ok(cli(b, "produce", "waiting", "--sync", input_bytes=b"a\nb\nc\n"))
    # As from an interactive shell: SIGINT at its default in the consumer, whatever this process inherited. A test
    # run started in the background (`make test &`, a CI runner) ignores SIGINT, an ignored signal stays ignored
    # across exec, and Python then installs no KeyboardInterrupt handler: Ctrl-C would do nothing. A signal this
    # process catches is reset to its default in the child instead. (PYTHONFAULTHANDLER: a consumer that still
    # runs 10 s after SIGINT is sent SIGABRT and prints every thread's stack.)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        consumer = subprocess.Popen([sys.executable, "-m", "pipeline", "consume", "waiting", "--from-beginning",
                                     "--bootstrap-server", b], cwd=REPO_ROOT,
                                    env={**os.environ, "PYTHONFAULTHANDLER": "1"},
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    finally:
        signal.signal(signal.SIGINT, inherited)
    try:
        # Output reaches a pipe reader while the consumer waits for more (it is flushed periodically).
        assert [consumer.stdout.readline() for _ in range(3)] == [b"a\n", b"b\n", b"c\n"]
        consumer.send_signal(signal.SIGINT)
        try:
            out, err = consumer.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            consumer.send_signal(signal.SIGABRT)
            out, err = consumer.communicate(timeout=10)
            pytest.fail(f"consume went on for 10 s after SIGINT; its stacks:\n{err.decode(errors='replace')}")
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.communicate()
    assert consumer.returncode == 130, err.decode()
    assert out == b"" and b"Traceback" not in err
    assert re.search(rb"consumed 3 messages in [\d.]+ s", err), err
