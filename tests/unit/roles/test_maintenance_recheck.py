"""The maintenance role's check right before a drained node's replicas go down (tasks/watch_check.yml with
pairserve_maintenance_watch_check_settle, after plan.yml), through Ansible with real HTTP probes: the other targets'
workers and replicas that answered when the drain was planned are asked again; one that stopped answering since
stops the maintenance there (pairserve_maintenance_watch_lost set, so the caller's rescue gives the node its weights
back) naming the node and the address, while a later check (no settle) does not ask. A local server stands in for
node-b's worker and replica: it answers 200 to the plan's probes, then what the test says.

The lab's faults scenario (molecule/faults) kills node-b's worker right after node-a's drain: the failure came 2 s
before a check that only read the watch, under its 15 s grace, and node-a's replicas were stopped with the route
answering nothing."""

from __future__ import annotations

from support.ansible_runner import run_local_play
from support.local_http import JsonStub
from support.maintenance_plan import PLAN_TASK, plan_vars

PLAN_PROBES = 2  # the worker's /healthz and the replica's /health, once each


def play(tmp_path, port, settle=True):
    tasks = [
        PLAN_TASK,
        {"name": "Check before the replicas go down", "ansible.builtin.include_role": {
            "name": "pairserve.llm.maintenance", "tasks_from": "watch_check"},
         "vars": {"pairserve_maintenance_watch_check_settle": settle}},
        {"name": "Say what the check noted", "ansible.builtin.debug": {
            "msg": "lost={{ pairserve_maintenance_watch_lost | default('unset') }}"}},
    ]
    return run_local_play(tmp_path, "recheck", tasks, plan_vars(port, port, pairserve_maintenance_watch_grace=2))


def after_plan(status):
    """A stand-in for node-b: 200 to the plan's probes, then `status` to every request."""
    return JsonStub(lambda request, seen=[]: (200 if len(seen.append(1) or seen) <= PLAN_PROBES else status, {}))


def test_a_worker_lost_after_the_drain_stops_it_before_the_replicas_go_down(tmp_path):
    with after_plan(503) as node_b:
        res = play(tmp_path, node_b.port)
    assert res.rc != 0, res.stdout[-3000:]
    msg = " ".join(res.result["msg"].split())
    assert ("While localhost was drained, the other targets stopped answering before its replicas went down: route "
            "qwen: no other target can serve it while this node is drained: [node-b] the worker at "
            "http://127.0.0.1:%d does not answer" % node_b.port) in msg, msg
    assert "its route weights are given back" in msg, msg
    # Asked until the grace was over (2 s, a try a second), not once.
    assert len([r for r in node_b.seen if r.path == "/healthz"]) >= 3, [r.path for r in node_b.seen]
    lost = res.by_task.get("Note whether a route lost every other target before this node's replicas go down")
    assert lost is not None and lost["ansible_facts"]["pairserve_maintenance_watch_lost"] is True, lost


def test_the_other_targets_still_answer_so_the_maintenance_goes_on(tmp_path):
    with after_plan(200) as node_b:
        res = play(tmp_path, node_b.port)
    assert res.rc == 0, res.stdout[-3000:]
    assert "lost=False" in res.stdout, res.stdout[-2000:]
    assert len(node_b.seen) == 2 * PLAN_PROBES, [r.path for r in node_b.seen]


def test_a_later_check_does_not_ask_again(tmp_path):
    # After the replicas went down the watch alone judges (its grace); a skipped probe loop is no failure.
    with after_plan(503) as node_b:
        res = play(tmp_path, node_b.port, settle=False)
    assert res.rc == 0, res.stdout[-3000:]
    assert len(node_b.seen) == PLAN_PROBES, [r.path for r in node_b.seen]
    assert "lost=unset" in res.stdout or "lost=False" in res.stdout, res.stdout[-2000:]
