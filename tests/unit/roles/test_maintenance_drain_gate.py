"""The maintenance role's plan step (tasks/plan.yml, before every drain: patch restart, upgrade, rebuild, bench arm)
through Ansible, with real HTTP probes: a node that serves its route now is drained only when another target's
worker and replica answer where the server reaches them; otherwise the step fails naming the other node, the
address asked and the way out, before any weight changes. Local servers stand in for node-b's worker and replica;
a closed port for a worker that is down."""

from __future__ import annotations

import socket

import pytest

from support.ansible_runner import run_local_play
from support.local_http import JsonStub
from support.maintenance_plan import PLAN_TASK, plan_vars


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def play(tmp_path, worker_port, replica_port, node_a_state="running", allow_downtime=False, **extra):
    return run_local_play(tmp_path, "plan step", [PLAN_TASK], plan_vars(
        worker_port, replica_port, node_a_state, pairserve_maintenance_allow_downtime=allow_downtime, **extra))


@pytest.fixture()
def node_b():
    with JsonStub(lambda r: (200, {})) as server:
        yield server


def test_the_other_node_answers_so_the_drain_is_planned(tmp_path, node_b):
    res = play(tmp_path, node_b.port, node_b.port)
    assert res.rc == 0, res.stdout[-3000:]
    assert {r.path for r in node_b.seen} == {"/healthz", "/health"}


def test_the_other_nodes_worker_is_down_so_the_drain_is_refused_naming_it(tmp_path, node_b):
    dead = closed_port()
    res = play(tmp_path, dead, node_b.port)
    assert res.rc != 0
    msg = res.result["msg"]
    assert msg.startswith("localhost serves its routes now and draining it would leave them nothing: route qwen: "
                          "no other target can serve it while this node is drained: [node-b] the worker at "
                          "http://127.0.0.1:%d does not answer" % dead), msg
    assert "GPUStack lists qwen-node-b-y as running" in msg and "pairserve_maintenance_allow_downtime=true" in msg
    # the operator accepts the outage: planned, nothing asked
    seen = len(node_b.seen)
    res = play(tmp_path, dead, node_b.port, allow_downtime=True)
    assert res.rc == 0, res.stdout[-3000:]
    assert len(node_b.seen) == seen


def test_a_node_that_serves_nothing_now_is_not_held_to_the_others(tmp_path):
    res = play(tmp_path, closed_port(), closed_port(), node_a_state="error")
    assert res.rc == 0, res.stdout[-3000:]


def test_a_bad_watch_setting_is_refused_before_any_probe(tmp_path, node_b):
    res = play(tmp_path, node_b.port, node_b.port, pairserve_maintenance_watch_stop_grace=-5)
    assert res.rc != 0
    msg = res.result["msg"]
    assert msg.startswith("localhost: the route watch needs pairserve_maintenance_watch_grace (15) and "
                          "pairserve_maintenance_watch_stop_grace (-5) of 0 seconds or more"), msg
    assert msg.endswith("Nothing was drained: fix the inventory and run the play again."), msg
    assert not node_b.seen
