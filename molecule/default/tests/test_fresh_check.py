"""`site.yml --check` on fresh nodes (nothing installed yet) passes and shows the changes a real run makes.

scripts/lab.sh runs it before the first converge and names its log in PAIRSERVE_FRESH_CHECK_LOG (the lab is converged
when these tests run, so the test reads that log rather than running it again). Check mode builds only the node
venv the read-only checks run in (pairserve_node_venv_in_check_mode), checks the hosts, GPUs, checkpoint hub and
runner image for real, and says what it cannot check before the GPUStack server first runs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from lab.api import STATE


@pytest.fixture(scope="module")
def log():
    path = Path(os.environ.get("PAIRSERVE_FRESH_CHECK_LOG", STATE / "converge-fresh-check.log"))
    assert path.exists(), f"{path} is missing: scripts/lab.sh test writes it before the first converge"
    return path.read_text(encoding="utf-8", errors="replace")


def test_check_mode_on_fresh_nodes_fails_nothing_and_shows_changes(log):
    recap = {host: (int(changed), int(failed)) for host, changed, failed in
             re.findall(r"^(node-[ab])\s*:.*?changed=(\d+).*?failed=(\d+)", log, re.M)}
    assert set(recap) == {"node-a", "node-b"}, recap
    assert all(failed == 0 and changed > 0 for changed, failed in recap.values()), recap


def test_the_node_checks_ran_and_what_needs_the_server_is_named(log):
    # The read-only checks that need the node venv ran: the GPU pairs of the recorded hosts, the checkpoint's hub.
    section = log.split("TASK [Find the GPU pairs]", 1)[1].split("TASK [", 1)[0]
    assert "ok: [node-a]" in section and "ok: [node-b]" in section, section
    assert "TASK [pairserve.llm.checkpoint : " in log and "TASK [pairserve.llm.runner_image : " in log
    assert "Check mode: the GPUStack server on node-a does not run yet" in log
