"""`python -m pipeline status` against a live reduced deployment: the figures arrive (events/s of both
datacenters, an ETL run), every program is named, and a program stopped through supervisord makes it exit 1."""

from __future__ import annotations

import json
from typing import Any

from infra.deployment.programs import programs
from tests.support.deployment import Deployment
from tests.support.polling import wait_until

FIGURES_TIMEOUT_S = 120


def process_row(text: str, name: str) -> list[str]:
    """The cells of ``name``'s row in the processes table of the status text (the lines after PROCESS up to the
    first empty one)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("PROCESS "))
    table = lines[start + 1:lines.index("", start)]
    return next(line.split() for line in table if line.split()[0] == name)


def test_status_shows_every_program_and_the_figures_and_exits_1_once_a_program_is_stopped() -> None:
    deployment = Deployment()
    try:
        deployment.up()
        names = [program.name for program in programs(deployment.topology)]
        seen: list[dict[str, Any]] = []

        def figures_arrived() -> dict[str, Any] | None:
            result = deployment.command("status", "--json", module="pipeline", check=False)
            document = json.loads(result.stdout)
            seen[:] = [document]
            rates = document["figures"]["events_per_second"].get("value") or {}
            etl = document["figures"]["etl"].get("value")
            arrived = result.returncode == 0 and all((rates.get(dc) or 0) > 0 for dc in ("dc1", "dc2")) and etl
            return document if arrived else None

        document = wait_until(figures_arrived, FIGURES_TIMEOUT_S, interval=1.0,
                              message=lambda: f"events/s of dc1 and dc2 and an ETL run in {json.dumps(seen)[-3000:]}")
        assert [p["name"] for p in document["processes"]] == names
        assert document["figures"]["etl"]["value"]["outcome"] in ("succeeded", "nothing-new")
        assert set(document["figures"]["mirror_lag"]["value"]) == {"dc1", "dc2"}
        assert "error" not in document["figures"]["audit"] and "error" not in document["figures"]["alerts"]

        text = deployment.command("status", module="pipeline", check=False).stdout
        for name in names:
            assert process_row(text, name)[1] == "RUNNING", text
        for label in ("events/s", "mirror lag", "last ETL run", "audit", "alerts"):
            assert any(line.startswith(label) for line in text.splitlines()), text

        deployment.supervisor.stop("emulators-dc2")
        stopped = deployment.command("status", module="pipeline", check=False)
        assert stopped.returncode == 1, stopped.stdout + stopped.stderr
        assert process_row(stopped.stdout, "emulators-dc2")[1:3] == ["STOPPED", "-"], stopped.stdout
    finally:
        deployment.close()
