"""bench.compare's figures: what it reads from each benchmark's output, and the medians, ratios and
spreads it reports (no benchmark is run)."""

from __future__ import annotations

import pytest

from bench.compare import BENCHMARKS, Benchmark, FigureSummary, format_table, higher_is_better, parse_figures, summarize

PRODUCE = next(b for b in BENCHMARKS if b.name == "broker-produce")
CONSUME = next(b for b in BENCHMARKS if b.name == "client-consume")


def test_the_produce_bench_figures_by_acks_with_thousands_separators():
    output = """broker produce, pre-encoded batches of 200-byte records, 1 pipelined connection(s)
  batch   50  acks  0:      6,840 requests/s      341,999 msg/s    1.820 broker CPU us/record      91.0 us/request
  batch   50  acks  1:      7,618 requests/s      380,916 msg/s    1.750 broker CPU us/record      87.5 us/request
"""
    assert parse_figures(PRODUCE, output) == {
        "acks 0 msg/s": 341999.0, "acks 1 msg/s": 380916.0,
        "acks 0 broker CPU us/record": 1.82, "acks 1 broker CPU us/record": 1.75}


def test_an_older_produce_bench_without_the_cpu_figure_gives_the_others():
    output = "  batch   50  acks  0:      6,347 requests/s      317,371 msg/s\n"
    assert parse_figures(PRODUCE, output) == {"acks 0 msg/s": 317371.0}


def test_the_last_line_of_a_label_counts_and_labels_are_whitespace_normalized():
    output = """ round 1
  ours Consumer, 1 MiB fetches                     100,000 msg/s     19.1 MB/s  (2.00 s)
 best of rounds
  ours Consumer, 1 MiB fetches                     120,500 msg/s
"""
    assert parse_figures(CONSUME, output) == {"ours Consumer, 1 MiB fetches msg/s": 120500.0}


def test_every_benchmark_figure_is_a_named_value_pattern():
    for benchmark in BENCHMARKS:
        assert isinstance(benchmark, Benchmark) and benchmark.figures
        assert all("(?P<value>" in figure.pattern for figure in benchmark.figures)


def test_medians_ratio_and_spread_over_pairs():
    pairs = [({"x": 100.0}, {"x": 150.0}), ({"x": 200.0}, {"x": 220.0}), ({"x": 120.0}, {"x": 120.0})]
    summary = summarize(pairs)["x"].as_dict()
    assert summary["base_median"] == 120.0 and summary["work_median"] == 150.0
    assert summary["ratio"] == pytest.approx(1.25)
    assert summary["spread"] == pytest.approx([1.0, 1.5])


def test_a_failed_run_or_a_figure_on_one_side_only_has_no_pair_ratio():
    pairs = [(None, {"x": 5.0, "cpu": 1.0}), ({"x": 4.0}, {"x": 6.0, "cpu": 1.2})]
    summary = summarize(pairs)
    assert summary["x"].as_dict()["spread"] == pytest.approx([1.5, 1.5])
    assert summary["x"].base == [4.0] and summary["x"].work == [5.0, 6.0]
    cpu = summary["cpu"].as_dict()
    assert cpu["base_median"] is None and cpu["ratio"] is None and cpu["spread"] is None
    assert FigureSummary().as_dict()["ratio"] is None


def test_the_direction_of_a_labelled_figure():
    assert higher_is_better(PRODUCE, "acks 1 msg/s")
    assert not higher_is_better(PRODUCE, "acks 1 broker CPU us/record")


def test_the_table_names_missing_sides():
    results = {"etl": {"notes": {"base": ["missing"], "work": ["ok"]}, "figures": {
        "rows/s": {**summarize([(None, {"rows/s": 10.0})])["rows/s"].as_dict(), "higher_is_better": True}}}}
    table = format_table(results)
    assert "BASE: missing" in table and "rows/s (higher is better)" in table


def test_the_client_produce_figures_by_case():
    producer = next(b for b in BENCHMARKS if b.name == "client-produce")
    output = ("  ours-sync     batch  50 acks  1:    120,000 msg/s    24.0 MB/s\n"
              "  ours-async    batch  50 acks  1:     80,500 msg/s    16.1 MB/s\n")
    assert parse_figures(producer, output) == {"ours-sync msg/s": 120000.0, "ours-async msg/s": 80500.0}
