"""The fault drills against real processes: the members of a process group found in /proc."""

from __future__ import annotations

import os
import subprocess
import sys

from infra.deployment.chaos import group_members
from tests.support.polling import wait_until


def test_group_members_are_the_live_processes_of_a_process_group() -> None:
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                               "time.sleep(60)"], start_new_session=True)
    try:
        found = wait_until(lambda: len(members := group_members(leader.pid)) == 2 and members,
                           timeout=10, message="the leader and its child")
        assert leader.pid in found
        assert os.getpid() in group_members(os.getpgid(0))
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
    wait_until(lambda: not group_members(leader.pid), timeout=10, message="the group to be gone")
