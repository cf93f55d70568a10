"""pipeline.zk.server's port choice: the OS's pick, never a port this process was given before (two servers
set up before either binds must not share one)."""

from __future__ import annotations

from pipeline.zk.server import free_port


def test_free_port_never_repeats_within_a_process():
    taken = [free_port() for _ in range(500)]
    assert len(set(taken)) == len(taken)
