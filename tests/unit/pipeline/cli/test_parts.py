"""Unit tests of the command line's pieces: argument parsing, line reading, key parsing, output, throttle."""

from __future__ import annotations

import argparse
import io
import json
import os
from types import SimpleNamespace

import pytest

from pipeline.cli import build_parser, main
from pipeline.cli import progress as progress_module
from pipeline.cli.common import EXIT_USAGE, CliError
from pipeline.cli.consume import output_options, start_offset
from pipeline.cli.offsets import offset_time
from pipeline.cli.output import formatter
from pipeline.cli.produce import FixedPartitioner, KeyParser, acks_value, key_parsing, read_line_blocks
from pipeline.cli.progress import Progress, Throttle, summary
from pipeline.cli.topics import format_description
from pipeline.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicDescription
from pipeline.client.cluster import PartitionInfo
from tests.support.polling import wait_until


def test_bootstrap_server_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_BOOTSTRAP_SERVER", "10.0.0.7:9999")
    args = build_parser().parse_args(["topics", "list"])
    assert args.bootstrap_server == "10.0.0.7:9999"
    args = build_parser().parse_args(["topics", "list", "--bootstrap-server", "h:1"])
    assert args.bootstrap_server == "h:1"


def test_kafka_spellings_of_options_are_accepted() -> None:
    args = build_parser().parse_args(["produce", "t", "--broker-list", "h:1", "--request-required-acks", "all",
                                      "--property", "parse.key=true", "--property", "key.separator=:"])
    assert (args.bootstrap_server, args.acks) == ("h:1", -1)
    assert args.property == [("parse.key", "true"), ("key.separator", ":")]


@pytest.mark.parametrize("argv", [
    [],
    ["topics"],
    ["topics", "create", "t"],
    ["topics", "create", "t", "--partitions", "0"],
    ["topics", "create", "t", "--partitions", "x"],
    ["topics", "create", "t", "--partitions", "1", "--config", "novalue"],
    ["produce", "t", "--acks", "2"],
    ["produce", "t", "--compression-codec", "brotli"],
    ["consume", "t", "--format", "xml"],
    ["consume", "t", "--offset", "-3", "--partition", "0"],
    ["offsets", "t", "--time", "yesterday"],
    ["offsets", "t", "--bootstrap-server", "no-port"],
])
def test_bad_arguments_exit_2_with_a_usage_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_help_exists_on_every_level(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["topics", "--help"], ["topics", "create", "--help"], ["topics", "describe", "--help"],
                 ["produce", "--help"], ["consume", "--help"], ["offsets", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: python -m pipeline")
        assert "--bootstrap-server" in out or argv in (["--help"], ["topics", "--help"])


def test_argument_types() -> None:
    assert offset_time("earliest") == EARLIEST_TIMESTAMP
    assert offset_time("LATEST") == LATEST_TIMESTAMP
    assert offset_time("1700000000000") == 1700000000000
    assert start_offset("17") == 17 and start_offset("earliest") == "earliest"
    assert acks_value("all") == -1 and acks_value("0") == 0
    for parse, text in ((offset_time, "-3"), (start_offset, "soon"), (acks_value, "2")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_read_line_blocks_splits_lines_across_reads_and_strips_cr() -> None:
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, b"a\r\nb\nc")
        with os.fdopen(read_fd, "rb", closefd=False) as stream:
            blocks = read_line_blocks(stream)
            assert next(blocks) == [b"a", b"b"]
            os.write(write_fd, b"c\n\nlast")
            assert next(blocks) == [b"cc", b""]
            os.close(write_fd)
            write_fd = -1
            assert list(blocks) == [[b"last"]]
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def test_key_parser_groups_runs_of_equal_keys_and_reports_the_bad_line() -> None:
    parser = KeyParser(b":", ignore_error=False)
    assert list(parser.runs([b"k1:a", b"k1:b:c", b"k2:d", b"k1:e"])) == [
        (b"k1", [b"a", b"b:c"]), (b"k2", [b"d"]), (b"k1", [b"e"])]
    with pytest.raises(CliError, match="line number 6"):
        list(parser.runs([b"k:x", b"no separator"]))
    lenient = KeyParser(b":", ignore_error=True)
    assert list(lenient.runs([b"plain", b"k:v"])) == [(None, [b"plain"]), (b"k", [b"v"])]


def test_key_parsing_from_kafka_properties_or_the_simple_option() -> None:
    def options(**kw: object) -> SimpleNamespace:
        return SimpleNamespace(**{"key_separator": None, "property": [], **kw})

    assert key_parsing(options()) is None
    assert key_parsing(options(property=[("parse.key", "true")])).separator == b"\t"
    assert key_parsing(options(property=[("parse.key", "true"), ("key.separator", "::")])).separator == b"::"
    assert key_parsing(options(key_separator="|")).separator == b"|"
    with pytest.raises(CliError):
        key_parsing(options(property=[("parse.keys", "true")]))
    with pytest.raises(CliError):
        key_parsing(options(key_separator=""))


def test_fixed_partitioner_ignores_the_key() -> None:
    assert {FixedPartitioner(2).partition(k, 4) for k in (None, b"a", b"b")} == {2}


def message(**kw: object) -> SimpleNamespace:
    fields = {"topic": "t", "partition": 1, "offset": 7, "timestamp": 1700000000123, "key": b"k", "value": b"v",
              "headers": []}
    fields.update(kw)
    return SimpleNamespace(**fields)


def test_formatters() -> None:
    assert formatter("value")(message()) == b"v\n"
    assert formatter("value")(message(value=None)) == b"null\n"
    assert formatter("key-value", b"=")(message()) == b"k=v\n"
    assert formatter("key-value")(message(key=None)) == b"null\tv\n"
    line = formatter("json")(message(key=None, value="é\\".encode() + b"\xff", headers=[("h", b"1")]))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"topic": "t", "partition": 1, "offset": 7, "timestamp": 1700000000123, "key": None,
                                "value": "é\\\\xff", "headers": [["h", "1"]]}
    with pytest.raises(ValueError):
        formatter("xml")


def test_output_options_accept_kafka_print_key() -> None:
    args = SimpleNamespace(format="value", key_separator="\t", property=[("print.key", "true"), ("key.separator", ",")])
    assert output_options(args) == ("key-value", b",")
    with pytest.raises(CliError):
        output_options(SimpleNamespace(format="value", key_separator="\t", property=[("print.value", "true")]))


def test_describe_output_follows_kafka_topics() -> None:
    description = TopicDescription("events", (PartitionInfo(0, 1, 0, [1, 2], [1]), PartitionInfo(1, -1, 5, [2], [])))
    assert format_description(description, {"cleanup.policy": "compact", "segment.bytes": "1024"}).splitlines() == [
        "Topic: events\tPartitionCount: 2\tReplicationFactor: 2\tConfigs: cleanup.policy=compact,segment.bytes=1024",
        "\tTopic: events\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1",
        "\tTopic: events\tPartition: 1\tLeader: none\tReplicas: 2\tIsr: \tError: LEADER_NOT_AVAILABLE",
    ]


class FakeClock:
    """monotonic() and sleep() for the throttle: sleeping advances the clock."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_throttle_holds_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(progress_module, "time", clock)
    throttle = Throttle(1000.0)
    throttle.wait(0)
    assert clock.slept == []
    throttle.wait(500)
    assert clock.slept == [pytest.approx(0.5)]
    clock.now += 2.0  # fell behind: no waiting until the count catches up with the clock
    throttle.wait(1000)
    assert len(clock.slept) == 1
    throttle.wait(3000)
    assert clock.now - 100.0 == pytest.approx(3.0)
    unlimited = Throttle(0)
    unlimited.wait(10**9)
    assert len(clock.slept) == 2


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_writes_only_to_a_terminal() -> None:
    quiet = io.StringIO()
    with Progress("produced", stream=quiet, interval_s=0.01) as progress:
        progress.count = 5
    assert quiet.getvalue() == ""
    tty = FakeTty()
    with Progress("produced", stream=tty, interval_s=0.01) as progress:
        progress.count = 42
        wait_until(lambda: "42 messages" in tty.getvalue(), timeout=5, message="a progress line")
    text = tty.getvalue()
    assert "\rproduced 42 messages" in text and text.endswith("\r\x1b[K")


def test_summary_line() -> None:
    assert summary("produced", 5000, 0.5) == "produced 5000 messages in 0.50 s (10,000 msg/s)"
