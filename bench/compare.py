"""Paired benchmark comparison (`make bench-compare BASE=<commit>`): BASE against the working tree.

The core benchmarks run alternately on BASE and on the working tree, in one virtualenv, and each figure's
medians, ratio and spread are printed.

BASE is checked out into a temporary git worktree. Every run has its tree as working directory and first on
PYTHONPATH, and a sitecustomize (put on PYTHONPATH, so inherited by the brokers and other children a
benchmark starts) drops the virtualenv's editable-install finder, which would otherwise fill the modules BASE
lacks from the working tree; which files each side really imports is checked once per side. Pairs alternate
which side runs first. A benchmark missing at BASE, or failing there, is reported as such. The ratio is the
working tree's median over BASE's; the spread is the lowest and highest ratio of the pairs. Results are also
written to bench/results/compare-<date>-<base>.json.

    .venv/bin/python -m bench.compare --base COMMIT [--pairs 3] [--only broker-produce,audit,...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TIMEOUT_S = 300
_NUMBER = r"(?P<value>-?[\d,]+(?:\.\d+)?)"


@dataclass(frozen=True)
class Figure:
    """A figure a benchmark prints: its name (``{label}`` takes the pattern's ``label`` group, if it has one),
    a regular expression whose ``value`` group is the number (the last match of each name counts), and
    whether higher is better."""

    name: str
    pattern: str
    higher_is_better: bool = True


@dataclass(frozen=True)
class Benchmark:
    """One benchmark command (module, fixed arguments) and the figures read from its output."""

    name: str
    module: str
    args: tuple[str, ...]
    figures: tuple[Figure, ...]


BENCHMARKS = (
    Benchmark("broker-produce", "bench.broker_produce_bench",
              ("--messages", "30000", "--batches", "50", "--acks", "0,1"),
              (Figure("acks {label} msg/s", rf"batch +50 +acks +(?P<label>\d+): +[\d,]+ requests/s +{_NUMBER} msg/s"),
               Figure("acks {label} broker CPU us/record", rf"acks +(?P<label>\d+):.* {_NUMBER} broker CPU us/record",
                      higher_is_better=False))),
    Benchmark("broker-fetch", "bench.kcat_bench", ("--messages", "300000"),
              (Figure("kcat produce msg/s", rf"produce: +{_NUMBER} msg/s"),
               Figure("kcat consume msg/s", rf"consume: +{_NUMBER} msg/s"))),
    Benchmark("client-produce", "bench.producer_bench",
              ("--messages", "100000", "--batches", "50", "--acks", "1", "--no-kafka-python"),
              (Figure("{label} msg/s", rf"(?P<label>ours-\w+) +batch +50 acks +1: +{_NUMBER} msg/s"),)),
    Benchmark("client-consume", "bench.consumer_bench",
              ("--messages", "200000", "--rounds", "1", "--skip-kafka-python"),
              (Figure("{label} msg/s", rf"(?m)^ +(?P<label>ours [^\n]*?) +{_NUMBER} msg/s"),)),
    Benchmark("mirror", "bench.mirror_bench", ("--messages", "50000", "--seconds", "3"),
              (Figure("records/s", rf"throughput: {_NUMBER} records/s"),)),
    Benchmark("etl", "bench.etl_bench", ("--events", "50000"), (Figure("rows/s", rf"{_NUMBER} rows/s"),)),
    Benchmark("audit", "bench.audit_bench", ("--events", "100000"),
              (Figure("CPU s per million events", rf"{_NUMBER} CPU seconds per million events",
                      higher_is_better=False),)),
)

# Put on PYTHONPATH: Python imports it at start-up, after the .pth files that install the editable finder.
SITECUSTOMIZE = '''"""bench.compare: import only from PYTHONPATH's tree, never from the editable install's."""
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
'''
_IMPORT_CHECK = ("import bench, broker, pipeline\n"
                 "print(*(path for package in (bench, broker, pipeline) for path in package.__path__))")


def parse_figures(benchmark: Benchmark, output: str) -> dict[str, float]:
    """The figures ``benchmark`` printed in ``output``, by name (the last match of each pattern and label)."""
    figures: dict[str, float] = {}
    for figure in benchmark.figures:
        for match in re.finditer(figure.pattern, output):
            label = match.groupdict().get("label")
            figures[figure.name.format(label=" ".join(label.split()) if label else "")] = float(
                match["value"].replace(",", ""))
    return figures


@dataclass
class FigureSummary:
    """One figure on both sides: medians, the ratio of the medians (working tree / BASE) and the lowest and
    highest ratio of a pair where both sides have it."""

    base: list[float] = field(default_factory=list)
    work: list[float] = field(default_factory=list)
    pair_ratios: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        base = statistics.median(self.base) if self.base else None
        work = statistics.median(self.work) if self.work else None
        return {"base": self.base, "work": self.work, "base_median": base, "work_median": work,
                "ratio": work / base if base and work is not None else None,
                "spread": [min(self.pair_ratios), max(self.pair_ratios)] if self.pair_ratios else None}


def summarize(pairs: list[tuple[dict[str, float] | None, dict[str, float] | None]]) -> dict[str, FigureSummary]:
    """Per figure name, the summary of ``pairs`` (BASE's figures, the working tree's; None for a failed run)."""
    summary: dict[str, FigureSummary] = {}
    for base, work in pairs:
        for name in sorted({*(base or {}), *(work or {})}):
            entry = summary.setdefault(name, FigureSummary())
            if base and name in base:
                entry.base.append(base[name])
            if work and name in work:
                entry.work.append(work[name])
            if base and work and name in base and name in work and base[name]:
                entry.pair_ratios.append(work[name] / base[name])
    return summary


def higher_is_better(benchmark: Benchmark, name: str) -> bool:
    """Whether a higher value of the figure called ``name`` (its label filled in) is better."""
    for figure in benchmark.figures:
        prefix, _, suffix = figure.name.partition("{label}")
        if name.startswith(prefix) and name.endswith(suffix):
            return figure.higher_is_better
    return True


def side_env(tree: Path, site_dir: Path) -> dict[str, str]:
    """The environment of a run in ``tree``: the tree, then the sitecustomize, first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), str(site_dir), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def check_imports(tree: Path, env: dict[str, str]) -> str:
    """Import the packages as a benchmark in ``tree`` would and fail unless every file comes from it."""
    out = subprocess.run([sys.executable, "-c", _IMPORT_CHECK], cwd=tree, env=env, capture_output=True,
                         text=True, timeout=60)
    files = out.stdout.split()
    if out.returncode or not files or not all(Path(f).resolve().is_relative_to(tree.resolve()) for f in files):
        raise SystemExit(f"bench.compare: a run in {tree} imports {files or out.stderr.strip()}, not that tree's code")
    return " ".join(files)


def run_once(benchmark: Benchmark, tree: Path, env: dict[str, str]) -> tuple[dict[str, float] | None, str]:
    """(figures, note) of one run of ``benchmark`` in ``tree``; figures None when it is missing or failed."""
    if not (tree / Path(*benchmark.module.split("."))).with_suffix(".py").exists():
        return None, "missing"
    try:
        out = subprocess.run([sys.executable, "-m", benchmark.module, *benchmark.args], cwd=tree, env=env,
                             capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {TIMEOUT_S} s"
    if out.returncode:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"failed (exit {out.returncode}): {last}"
    figures = parse_figures(benchmark, out.stdout)
    return (figures, "ok") if figures else (None, "printed none of its figures")


def format_table(results: dict[str, dict[str, object]]) -> str:
    """The report: per benchmark and figure, the medians, the ratio and its spread, or why there is none."""
    lines = [f"{'benchmark / figure':<66} {'BASE':>12} {'work':>12} {'ratio':>7}  spread"]
    for name, result in results.items():
        notes = sorted((set(result["notes"]["base"]) | set(result["notes"]["work"])) - {"ok"})
        lines.append(f"{name}" + (f"  (BASE: {', '.join(set(result['notes']['base']))}; "
                                  f"work: {', '.join(set(result['notes']['work']))})" if notes else ""))
        for figure, summary in result["figures"].items():
            ratio, spread = summary["ratio"], summary["spread"]
            better = "higher is better" if summary["higher_is_better"] else "lower is better"
            lines.append(
                f"  {figure + ' (' + better + ')':<64} {_fmt(summary['base_median']):>12} "
                f"{_fmt(summary['work_median']):>12} {f'{ratio:.3f}' if ratio else '-':>7}  "
                + (f"{spread[0]:.3f}-{spread[1]:.3f}" if spread else "-"))
    return "\n".join(lines)


def _fmt(value: object) -> str:
    return "-" if value is None else f"{value:,.3f}" if value < 100 else f"{value:,.0f}"


def compare(base: str, pairs: int, only: set[str] | None) -> dict[str, object]:
    """Run the comparison, print the table and return the results (also written as JSON)."""
    chosen = [b for b in BENCHMARKS if not only or b.name in only]
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{base}^{{commit}}"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        site_dir = Path(tmp) / "site"
        site_dir.mkdir()
        (site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), commit], cwd=REPO, check=True,
                       capture_output=True)
        try:
            sides = {"base": (base_tree, side_env(base_tree, site_dir)), "work": (REPO, side_env(REPO, site_dir))}
            for side, (tree, env) in sides.items():
                print(f"{side}: imports {check_imports(tree, env)}", flush=True)
            results: dict[str, dict[str, object]] = {}
            for benchmark in chosen:
                runs: list[tuple[dict[str, float] | None, dict[str, float] | None]] = []
                notes: dict[str, list[str]] = {"base": [], "work": []}
                for pair in range(pairs):
                    got: dict[str, dict[str, float] | None] = {}
                    for side in (("base", "work") if pair % 2 == 0 else ("work", "base")):
                        got[side], note = run_once(benchmark, *sides[side])
                        notes[side].append(note)
                        print(f"  {benchmark.name} pair {pair + 1} {side}: {note} {got[side] or ''}", flush=True)
                    runs.append((got["base"], got["work"]))
                results[benchmark.name] = {
                    "command": [benchmark.module, *benchmark.args], "notes": notes,
                    "figures": {k: {**v.as_dict(), "higher_is_better": higher_is_better(benchmark, k)}
                                for k, v in summarize(runs).items()}}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=REPO, capture_output=True)
    head = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
    report = {"base": commit, "work": head, "pairs": pairs, "results": results}
    print(f"\nBASE {commit[:12]} against the working tree ({head}), {pairs} alternating pair(s); medians")
    print(format_table(results))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"compare-{datetime.date.today().isoformat()}-{commit[:12]}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {path.relative_to(REPO)}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare the working tree with")
    parser.add_argument("--pairs", type=int, default=3, help="alternating (BASE, working tree) runs per benchmark")
    parser.add_argument("--only", default="", help="comma-separated benchmark names: "
                        + ", ".join(b.name for b in BENCHMARKS))
    args = parser.parse_args(argv)
    only = {name for name in args.only.split(",") if name}
    unknown = only - {b.name for b in BENCHMARKS}
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    compare(args.base, args.pairs, only or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
