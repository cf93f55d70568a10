"""The deployment's processes and ports, from the program rows of the default topology (infra/topology.yml)."""

from __future__ import annotations

import shlex
import sys

from infra.deployment.programs import STAGES, Program, programs
from infra.deployment.topology import DEFAULT_TOPOLOGY, REPO_ROOT, Topology, load
from infra.docs.markdown import table

__all__ = ["render_processes"]


def _command(program: Program) -> str:
    """The program's command line as a reader would type it from the repository (no machine's paths in it)."""
    words = ["python" if word == sys.executable else word.replace(f"{REPO_ROOT}/", "") for word in program.command]
    return shlex.join(words)


def _metrics_url(topology: Topology, program: Program) -> str:
    if program.metrics is None:
        return ""
    job, port, labels = program.metrics
    where = f"http://{topology.host}:{port}/metrics"
    label_text = "".join(f", {key}={value}" for key, value in sorted(labels.items()))
    return f"{where} (job {job}{label_text})"


def render_processes(topology: Topology | None = None) -> str:
    """The stages, each process of the deployment (metrics endpoint, health check, stop deadline, command line),
    and every port it listens on."""
    topology = topology if topology is not None else load(DEFAULT_TOPOLOGY)
    rows = programs(topology)
    process_table = table(("process", "stage", "metrics endpoint", "healthy when", "stop deadline"),
                          ((f"`{p.name}`", p.stage, _metrics_url(topology, p), p.health.description,
                            f"{p.stop_wait_s} s") for p in rows))
    commands = "\n".join(f"    {_command(p)}" for p in rows)
    ports = table(("port", "what listens"), ((str(port), what) for port, what in sorted(topology.ports())))
    return ("Stages start in this order, each once every process of the one before is healthy, and stop in the "
            f"reverse order: {', '.join(STAGES)}.\n\n" + process_table
            + "\n\nTheir command lines (`var/` is the topology's `var_dir`):\n\n" + commands
            + f"\n\nEvery port, on `{topology.host}`:\n\n" + ports)
