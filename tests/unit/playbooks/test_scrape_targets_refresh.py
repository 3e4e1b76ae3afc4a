"""The Prometheus scrape targets (pairserve_metrics_targets_file) follow a replica that a day-2 play restarts: GPUStack
gives the restarted replica a new instance on a new port, so every play that restarts replicas writes the file again
(route role, entry point scrape_targets) after them, when the file is set. Read from the playbooks' YAML; the run
itself: tests/integration/gpustack/test_day2.py (maintenance.yml, paused and finished).

Those plays run on a GPU node, often with --limit <node> (the server is then no host of the play): the entry point
reads the server's values from its hostvars and asks GPUStack from the server host, never from the node it runs on.
"""

from __future__ import annotations

import pytest
import yaml

from support.ansible_runner import REPO

PLAYBOOKS = REPO / "playbooks"
ROUTE_TASKS = REPO / "roles" / "route" / "tasks" / "scrape_targets.yml"

# The entry points after which a node's replicas run as new GPUStack instances (roles maintenance, upgrade, rebuild
# and bench).
RESTARTS = {
    ("pairserve.llm.maintenance", "maintenance"),
    ("pairserve.llm.upgrade", "node"),
    ("pairserve.llm.rebuild", "main"),
    ("pairserve.llm.maintenance", "worker_restart"),
    ("pairserve.llm.bench", "node_arm"),
}
# serve.yml restarts replicas as a step of site.yml, which ends with verify.yml: that play writes the file.
WRITTEN_LATER = {"serve.yml"}
# The day-2 plays that restart replicas, by playbook and play name.
DAY2 = {
    ("maintenance.yml", "Maintenance of one GPU node"),
    ("upgrade.yml", "Upgrade one replica at a time"),
    ("rebuild_node.yml", "Rebuild one GPU node"),
    ("rotate.yml", "The workers trust the server's CA first"),
    ("bench.yml", "Boot, check, measure and restore one A/B arm at a time"),
}
WHEN_SET = "lookup('pairserve.llm.setting', 'pairserve_metrics_targets_file') | length > 0"


def _role_call(task):
    for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
        if isinstance(task.get(key), dict):
            return task[key].get("name"), task[key].get("tasks_from", "main")
    return None


def _flat(tasks):
    """The tasks of a play in order, the tasks of blocks (and their rescue/always) in place."""
    for task in tasks or []:
        if "block" in task:
            yield from _flat(task["block"])
            yield from _flat(task.get("rescue"))
            yield from _flat(task.get("always"))
        else:
            yield task


def _plays():
    for path in sorted(PLAYBOOKS.glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            if "hosts" in play:
                yield path.name, play


def _restarting_plays():
    return {(name, play["name"]): play for name, play in _plays()
            if any(_role_call(t) in RESTARTS for t in _flat(play.get("tasks")))}


def test_the_day2_plays_that_restart_replicas_are_known():
    found = {key for key in _restarting_plays() if key[0] not in WRITTEN_LATER}
    assert found == DAY2


@pytest.mark.parametrize("key", sorted(DAY2), ids=lambda key: key[0])
def test_each_day2_play_writes_the_scrape_targets_after_the_replicas_restart(key):
    tasks = list(_flat(_restarting_plays()[key].get("tasks")))
    calls = [_role_call(t) for t in tasks]
    restart = max(i for i, call in enumerate(calls) if call in RESTARTS)
    writes = [i for i, call in enumerate(calls) if call == ("pairserve.llm.route", "scrape_targets")]
    assert len(writes) == 1, f"{key}: the play writes the scrape targets {len(writes)} times, not once"
    assert writes[0] > restart, f"{key}: the scrape targets are written before the replicas restart"
    when = tasks[writes[0]].get("when")
    conditions = when if isinstance(when, list) else [when]
    assert WHEN_SET in conditions, f"{key}: the scrape targets are not conditioned on the file being set: {when}"


def test_verify_still_writes_the_scrape_targets():
    [play] = [play for name, play in _plays() if name == "verify.yml"]
    calls = [_role_call(t) for t in _flat(play["tasks"])]
    assert ("pairserve.llm.route", "scrape_targets") in calls


def test_the_entry_point_reads_the_server_from_its_hostvars_wherever_it_runs():
    tasks = yaml.safe_load(ROUTE_TASKS.read_text())
    text = ROUTE_TASKS.read_text()
    # Nothing of the host the play runs on stands for the server.
    assert "inventory_hostname" not in text
    assert "ansible_host | default(inventory_hostname)" not in text
    [info] = [t for t in tasks if "pairserve.llm.gpustack_info" in t]
    assert info["delegate_to"] == "{{ pairserve_route_server }}"
    assert info["pairserve.llm.gpustack_info"]["api_url"] == \
        "{{ (groups | pairserve.llm.gpustack_server(hostvars, pairserve_route_server)).local_url }}"
    assert "hostvars[pairserve_route_server]" in info["pairserve.llm.gpustack_info"]["api_key"]
    assert info.get("run_once") is True
    [write] = [t for t in tasks if "ansible.builtin.copy" in t]
    assert write["delegate_to"] == "localhost" and write.get("run_once") is True
    server = write["vars"]["pairserve_route_scrape_targets"]
    assert "'host': pairserve_route_server" in server
    assert "hostvars[pairserve_route_server].ansible_host" in server
    route_vars = yaml.safe_load((REPO / "roles" / "route" / "vars" / "main.yml").read_text())
    assert route_vars["pairserve_route_server"] == "{{ (groups | pairserve.llm.gpustack_server(hostvars)).host }}"
