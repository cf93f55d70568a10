"""`consumer-groups` without a cluster: both spellings of the actions, the reset options, and the
offset plan of --reset-offsets from given offsets."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

import pytest

from pipeline.cli import build_parser, main
from pipeline.cli.common import EXIT_USAGE, CliError
from pipeline.cli.group_reset import (
    DATETIME,
    EARLIEST,
    LATEST,
    OFFSET,
    SHIFT,
    ResetTarget,
    TopicSelection,
    datetime_ms,
    plan_reset,
    target_of,
    topic_selection,
)

T0, T1, U0 = ("t", 0), ("t", 1), ("u", 0)
EARLIEST_OFFSETS = {T0: 10, T1: 0, U0: 5}
LATEST_OFFSETS = {T0: 100, T1: 50, U0: 5}
COMMITTED = {T0: 40, T1: 45}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["consumer-groups", *argv])


def test_kafka_flags_and_action_words_parse_alike() -> None:
    kafka = parse("--describe", "--group", "etl")
    ours = parse("describe", "etl")
    assert (kafka.mode, kafka.groups) == ("describe", ["etl"])
    assert (ours.action, ours.group_name) == ("describe", "etl")
    reset = parse("--reset-offsets", "--group", "g", "--topic", "t:2,0", "--topic", "u", "--shift-by", "-10",
                  "--execute", "--bootstrap-server", "h:1")
    assert reset.topics == [TopicSelection("t", (0, 2)), TopicSelection("u")]
    assert target_of(reset) == ResetTarget(SHIFT, -10) and reset.execute and reset.bootstrap_server == "h:1"
    assert target_of(parse("reset-offsets", "--to-earliest")) == ResetTarget(EARLIEST)
    assert target_of(parse("reset-offsets", "--to-offset", "7")) == ResetTarget(OFFSET, 7)
    assert parse("delete", "--group", "a", "--group", "b").groups == ["a", "b"]


@pytest.mark.parametrize("argv", [
    ["--list", "--describe"],
    ["--reset-offsets", "--to-earliest", "--to-latest"],
    ["--reset-offsets", "--dry-run", "--execute"],
    ["--reset-offsets", "--topic", "t:x"],
    ["--reset-offsets", "--topic", "t:-1"],
    ["--reset-offsets", "--to-datetime", "yesterday"],
    ["--reset-offsets", "--shift-by", "ten"],
    ["nothing"],
])
def test_bad_options_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["consumer-groups", *argv])
    assert exit_info.value.code == EXIT_USAGE and "error:" in capsys.readouterr().err


@pytest.mark.parametrize("argv,fragment", [
    ([], "an action is required"),
    (["describe", "--list"], "two actions given"),
    (["--describe"], "describe needs one group"),
    (["--reset-offsets", "--group", "g", "--topic", "t"], "needs one of --to-earliest"),
    (["--reset-offsets", "--group", "g", "--to-latest"], "either --topic"),
    (["--reset-offsets", "--group", "g", "--to-latest", "--topic", "t", "--all-topics"], "either --topic"),
    (["--delete"], "delete needs --group"),
])
def test_incomplete_actions_exit_2_before_connecting(argv: list[str], fragment: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # The bootstrap address is unreachable: these must fail on the arguments alone.
    assert main(["consumer-groups", *argv, "--bootstrap-server", "127.0.0.1:1"]) == EXIT_USAGE
    assert fragment in capsys.readouterr().err


def test_datetime_is_kafkas_format_in_local_time_or_with_a_zone() -> None:
    assert datetime_ms("2024-01-02T03:04:05.678Z") == 1704164645678
    assert datetime_ms("2024-01-02T04:04:05.678+01:00") == 1704164645678
    local = datetime(2024, 1, 2, 3, 4, 5, 678000)
    assert datetime_ms("2024-01-02T03:04:05.678") == int(local.timestamp() * 1000)
    assert datetime_ms("2024-01-02T03:04:05.678Z") == int(
        datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc).timestamp() * 1000)


def test_topic_selection() -> None:
    assert topic_selection("orders") == TopicSelection("orders")
    assert topic_selection("orders:3,1,3") == TopicSelection("orders", (1, 3))
    for bad in (":1", "orders:", "orders:1,,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            topic_selection(bad)


def plan(target: ResetTarget, at_time: dict | None = None) -> dict:
    return plan_reset(target, [U0, T1, T0], COMMITTED, EARLIEST_OFFSETS, LATEST_OFFSETS, at_time)


def test_plan_to_earliest_latest_and_offset() -> None:
    assert plan(ResetTarget(EARLIEST)) == {T0: 10, T1: 0, U0: 5}
    assert plan(ResetTarget(LATEST)) == {T0: 100, T1: 50, U0: 5}
    # An explicit offset outside a log is clamped into [log start, log end], as Kafka does.
    assert plan(ResetTarget(OFFSET, 30)) == {T0: 30, T1: 30, U0: 5}


def test_plan_to_datetime_takes_the_log_end_where_no_message_is_that_recent() -> None:
    assert plan(ResetTarget(DATETIME, 1), {T0: 20, T1: None, U0: None}) == {T0: 20, T1: 50, U0: 5}


def test_plan_shift_by_moves_committed_offsets_within_the_log() -> None:
    assert plan_reset(ResetTarget(SHIFT, -35), [T0, T1], COMMITTED, EARLIEST_OFFSETS, LATEST_OFFSETS) == \
        {T0: 10, T1: 10}
    assert plan_reset(ResetTarget(SHIFT, 7), [T0, T1], COMMITTED, EARLIEST_OFFSETS, LATEST_OFFSETS) == \
        {T0: 47, T1: 50}
    with pytest.raises(CliError, match="no committed offset"):
        plan(ResetTarget(SHIFT, 1))
