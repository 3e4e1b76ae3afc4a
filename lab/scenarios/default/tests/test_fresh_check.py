"""`site.yml --check` on fresh nodes (nothing installed yet) passes and shows the changes a real run makes.

`python -m lab test` runs it before the first converge and names its log in PAIRSERVE_FRESH_CHECK_LOG (the lab is
converged when these tests run, so the test reads that run's task results rather than running it again: the
pairserve_results callback's JSON lines, converge-fresh-check.jsonl beside the log). Check mode builds only the node
venv the read-only checks run in (pairserve_node_venv_in_check_mode), checks the hosts, GPUs, checkpoint hub and
runner image for real, and says what it cannot check before the GPUStack server first runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.api import STATE
from support.lab_suite import results

NODES = {"node-a", "node-b"}


@pytest.fixture(scope="module")
def run():
    return results(Path(os.environ.get("PAIRSERVE_FRESH_CHECK_LOG", STATE / "converge-fresh-check.log")))


def test_check_mode_on_fresh_nodes_fails_nothing_and_shows_changes(run):
    recap = {host: (counts["changed"], counts["failed"]) for host, counts in run.recap().items()}
    assert set(recap) == NODES, recap
    assert all(failed == 0 and changed > 0 for changed, failed in recap.values()), (recap, run.where(status="failed"))


def test_the_node_checks_ran_and_what_needs_the_server_is_named(run):
    # The read-only checks that need the node venv ran: the GPU pairs of the recorded hosts, the checkpoint's hub,
    # the runner image.
    pairs = run.where(action="pairserve.llm.gpu_pairs", status="ok")
    assert {r["_host"] for r in pairs} == NODES, [(r["_host"], r["_status"]) for r in run.where(action="gpu_pairs")]
    found = [((r.get("ansible_facts") or {}).get("pairserve_gpu") or {}).get("pairs") for r in pairs]
    assert all(found), found
    for role in ("pairserve.llm.checkpoint", "pairserve.llm.runner_image"):
        ran = {r["_host"] for r in run.where(role=role, status="ok")}
        assert ran, f"no task of {role} ran in check mode"
    # The server does not run yet: the role knows it, and says what check mode therefore cannot check.
    assert run.facts("node-a", "pairserve_gpustack_server_answers") in ([False], ["False"]), \
        run.facts("node-a", "pairserve_gpustack_server_answers")
    said = [" ".join(str(r["msg"]).split())
            for r in run.where(host="node-a", role="gpustack_server", task_file="tasks/bootstrap.yml",
                               action="ansible.builtin.debug", status="ok")]
    assert any(m.startswith("Check mode: the GPUStack server on node-a does not run yet") for m in said), said
