"""The CPU accounting per process kind: a supervisord tree's processes attributed to the nearest supervised
program, differences of CPU time between samples (a reused pid and a process started meanwhile included), the
parsing of /proc/PID/stat."""

from __future__ import annotations

import importlib
import os

proc_cpu = importlib.import_module("bench.capacity.proc_cpu")
Sample = proc_cpu.ProcSample


def test_program_kinds():
    assert proc_cpu.program_kind("broker-dc1-2") == "broker-dc1"
    assert proc_cpu.program_kind("broker-offline-1") == "broker-offline"
    assert proc_cpu.program_kind("emulators-dc2") == "emulators"
    assert proc_cpu.program_kind("zookeeper-3") == "zookeeper"
    for name in ("mirror", "audit", "etl", "registry", "prometheus"):
        assert proc_cpu.program_kind(name) == name


def _tree() -> dict[int, "proc_cpu.ProcSample"]:
    # 1 init -> 10 supervisord -> 11 broker, 12 etl -> 13 java -> 14 python worker; 99 elsewhere
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 14: 13, 99: 1}
    return {pid: Sample(ppid, started=pid, cpu_s=1.0, rss=4096) for pid, ppid in parents.items()}


def test_processes_belong_to_the_nearest_program():
    kinds = proc_cpu.kinds_of(_tree(), {10: "supervisord", 11: "broker-dc1", 12: "etl"})
    assert kinds == {10: "supervisord", 11: "broker-dc1", 12: "etl", 13: "etl", 14: "etl"}


def test_a_root_that_is_gone_is_left_out():
    assert proc_cpu.kinds_of(_tree(), {50: "mirror"}) == {}


def test_cpu_by_kind_counts_differences_new_processes_and_reused_pids():
    before = {11: Sample(10, 100, 5.0, 0), 12: Sample(10, 100, 2.0, 0), 13: Sample(12, 100, 7.0, 0)}
    after = {11: Sample(10, 100, 6.5, 0),   # ran 1.5 s
             12: Sample(10, 100, 9.25, 0),  # ran 0.25 s, and waited for the old 13 (7 s)
             13: Sample(12, 300, 0.5, 0),   # pid reused by a new process: all of its 0.5 s
             14: Sample(13, 400, 1.0, 0)}   # started meanwhile: all of it
    kinds = {11: "broker-dc1", 12: "etl", 13: "etl", 14: "etl"}
    assert proc_cpu.cpu_seconds_by_kind(before, after, kinds) == {"broker-dc1": 1.5, "etl": 1.75}


def test_a_child_that_exited_meanwhile_counts_only_its_time_after_the_first_sample():
    # worker 14 had used 3 s at the first sample, ran 1 s more and exited: its parent 13 waited for it, its
    # cutime grew by all 4 s
    before = {13: Sample(12, 100, 10.0, 0), 14: Sample(13, 200, 3.0, 0)}
    after = {13: Sample(12, 100, 10.5 + 4.0, 0)}
    assert proc_cpu.cpu_seconds_by_kind(before, after, {13: "etl"}) == {"etl": 1.5}


def test_an_exited_child_of_a_process_outside_the_tree_changes_nothing():
    before = {13: Sample(12, 100, 10.0, 0), 20: Sample(99, 200, 3.0, 0)}
    after = {13: Sample(12, 100, 11.0, 0), 99: Sample(1, 5, 50.0, 0)}
    assert proc_cpu.cpu_seconds_by_kind(before, after, {13: "etl"}) == {"etl": 1.0}


def test_rss_by_kind_sums_the_processes_of_a_kind():
    assert proc_cpu.rss_by_kind(_tree(), {11: "broker-dc1", 12: "etl", 13: "etl"}) == {"broker-dc1": 4096,
                                                                                      "etl": 8192}


def test_parse_stat_reads_a_command_with_spaces_and_parentheses():
    ticks = os.sysconf("SC_CLK_TCK")
    fields = ["S", "42"] + ["0"] * 9 + [str(ticks * 3), str(ticks), str(ticks * 2), "0"] + ["0"] * 4 + ["777"]
    pid, sample = proc_cpu.parse_stat(f"123 (a (b) c) {' '.join(fields)} 0 0", "100 25 0")
    assert pid == 123
    assert sample == Sample(42, 777, 6.0, 25 * os.sysconf("SC_PAGE_SIZE"))


def test_read_processes_sees_this_process_and_its_cpu():
    found = proc_cpu.read_processes()
    assert found[os.getpid()].ppid == os.getppid()
    assert found[os.getpid()].cpu_s > 0
    assert found[os.getpid()].rss > 0
