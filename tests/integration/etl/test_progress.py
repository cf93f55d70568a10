"""The terminal progress display on a real Spark local session running a job of many slow tasks."""

from __future__ import annotations

import io
import os
import re
import sys
import time
from typing import Iterator

import pytest

from etl.progress import TerminalProgress

TASKS = 24


@pytest.fixture(scope="module")
def spark_context() -> Iterator[object]:
    from pyspark.sql import SparkSession

    from etl.spark import stop_session

    saved = {name: os.environ.get(name) for name in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
    os.environ.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    spark = (SparkSession.builder.master("local[2]").appName("test-etl-progress")
             .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    try:
        yield spark.sparkContext
    finally:
        stop_session(spark)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_slow_job(spark_context: object) -> None:
    def _slow_task(index: int) -> int:  # local, so Spark ships it by value to workers that cannot import tests
        time.sleep(0.25)  # a task that takes a while, for the display to see it progress
        return index

    assert spark_context.parallelize(range(TASKS), TASKS).map(_slow_task).count() == TASKS  # type: ignore[attr-defined]


class Terminal(io.StringIO):
    """What a tty was sent."""

    def isatty(self) -> bool:
        return True


def _done_counts(text: str) -> list[int]:
    return [int(done) for done, total in re.findall(r"(\d+)/(\d+) tasks done", text) if int(total) == TASKS]


def test_plain_lines_show_the_tasks_progressing(spark_context: object) -> None:
    out = io.StringIO()
    with TerminalProgress(spark_context, out, plain_every_s=0.3):
        _run_slow_job(spark_context)
    text = out.getvalue()
    assert "\r" not in text
    counts = _done_counts(text)
    assert len(set(counts)) >= 2 and counts == sorted(counts), text
    assert re.search(r"\d+ running, 0 failed \(stage 1/1 of 1 job\), 0:0\d", text), text


def test_a_tty_gets_one_line_rewritten_in_place_and_erased_at_the_end(spark_context: object) -> None:
    out = Terminal()
    with TerminalProgress(spark_context, out, interval_s=0.2):
        _run_slow_job(spark_context)
    text = out.getvalue()
    assert "\n" not in text and text.count("\r") >= 3
    assert len(set(_done_counts(text))) >= 2, text
    assert text.split("\r")[-2].strip() == "" and text.endswith("\r"), "the last line is erased"
