"""`python -m infra.deployment up` when the deployment cannot come up: a port of its plan already taken is refused
before anything starts, naming the port and what it was for; a process that keeps dying stops `up` with a
non-zero exit naming it and showing the end of its log, and `down` then leaves nothing behind."""

from __future__ import annotations

import socket

from tests.support.deployment import Deployment


def test_a_port_of_the_plan_in_use_is_refused_before_anything_starts() -> None:
    deployment = Deployment()
    taken = deployment.topology.registry.port
    try:
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", taken))
            squatter.listen()
            result = deployment.command("up", check=False, timeout=60)
        assert result.returncode == 1
        (line,) = result.stderr.strip().splitlines()
        assert f"port {taken} (schema registry) is already in use" in line, line
        assert deployment.supervisor.pid() is None and deployment.leftovers() == []
    finally:
        deployment.close()


def test_a_process_that_does_not_come_up_is_named_with_the_end_of_its_log() -> None:
    deployment = Deployment()
    try:
        document = deployment.document
        # A broker of dc2 that cannot start: a setting out of its range makes it exit at once, every time.
        document["datacenters"]["dc2"]["settings"]["socket.request.max.bytes"] = 0
        deployment.rewrite(document)
        result = deployment.command("up", check=False, timeout=180)
        assert result.returncode == 1, result.stdout
        first, *tail = result.stderr.strip().splitlines()
        assert first.startswith("python -m infra.deployment up: broker-dc2-1 did not come up"), first
        assert "broker-dc2-1.log" in first
        assert any("socket.request.max.bytes" in line for line in tail), result.stderr
        # what came up before it is still running, and down stops it all
        assert deployment.supervisor.info("zookeeper-1").running
        down = deployment.command("down")
        assert "stopped zookeeper-1" in down.stdout
        assert deployment.supervisor.pid() is None and deployment.leftovers() == []
    finally:
        deployment.close()
