"""The rules of a node's maintenance (module_utils/maintenance.py, filters pairserve.llm.maintenance_host_problems
and pairserve.llm.maintenance_card_changes; playbooks/maintenance.yml decides with them), and the maintenance-mode
record module gpustack_worker_maintenance sends. The cards come from gpu_pairs' own code over the recorded hosts
(tests/fixtures/nvml/), and over recordings derived from them (a driver update that renames the cards, a card
gone)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.filter.maintenance import FilterModule
from ansible_collections.pairserve.llm.plugins.module_utils import maintenance, nvml, nvml_replay
from ansible_collections.pairserve.llm.plugins.modules.gpustack_worker_maintenance import wanted_maintenance
from support.ansible_runner import run_local_play

REPO = Path(__file__).resolve().parents[4]
NVML = REPO / "tests" / "fixtures" / "nvml"
NODES, SERVERS = ["node-a", "node-b"], ["node-a"]
FILTERS = FilterModule().filters()


def gather(path) -> dict:
    return nvml.gather({nvml_replay.ENV_VAR: str(path)}, group_size=2)


def derived(tmp_path, source, name, **device):
    data = json.loads((NVML / source).read_text())
    for dev in data["devices"]:
        dev.update(device)
    out = tmp_path / name
    out.write_text(json.dumps(data))
    return out


def test_one_gpu_node_that_is_not_the_server_may_be_rebooted():
    assert maintenance.host_problems(["node-b"], NODES, SERVERS, "reboot") == []
    for action in ("pause", "none"):
        assert maintenance.host_problems(["node-a"], NODES, SERVERS, action) == []


def test_a_run_without_limit_is_refused_naming_the_limit_and_the_hosts():
    [text] = maintenance.host_problems(["node-a", "node-b"], NODES, SERVERS, "none")
    assert "this run has 2 host(s) (node-a, node-b)" in text
    assert "run it with --limit <node> (one of node-a, node-b)" in text
    [text] = maintenance.host_problems([], NODES, SERVERS, "none")
    assert "this run has 0 host(s): run it with --limit <node>" in text


def test_a_host_outside_gpu_nodes_and_an_unknown_action_are_refused():
    texts = maintenance.host_problems(["outsider"], NODES, SERVERS, "shutdown")
    assert texts[0] == "pairserve_maintenance_action is 'shutdown'; it must be one of reboot, pause, none"
    assert texts[1] == "outsider is not in the group gpu_nodes: only a GPU node has replicas to take out of the route"
    assert len(texts) == 2


def test_a_reboot_of_the_server_node_is_refused_unless_the_outage_is_accepted():
    [text] = maintenance.host_problems(["node-a"], NODES, SERVERS, "reboot")
    assert text.startswith("node-a is also the GPUStack server: rebooting it stops the server, and every route")
    assert "-e pairserve_maintenance_allow_downtime=true" in text
    assert maintenance.host_problems(["node-a"], NODES, SERVERS, "reboot", allow_downtime=True) == []


def test_the_same_cards_after_the_change_are_no_change():
    fact = gather(NVML / "node-b-2x4070tis.json")
    assert maintenance.card_changes(fact, gather(NVML / "node-b-2x4070tis.json"), "node-b") == []


def test_a_driver_update_that_changes_what_the_cards_report_is_named_card_by_card(tmp_path):
    before = gather(NVML / "node-b-2x4070tis.json")
    after = gather(derived(tmp_path, "node-b-2x4070tis.json", "renamed.json", Name="NVIDIA GeForce RTX 4070 Ti SUPER X"))
    texts = maintenance.card_changes(before, after, "node-b")
    assert len(texts) == 2, texts
    uuid = before["gpus"][0]["uuid"]
    assert texts[0].startswith("node-b: GPU 0 was %s NVIDIA GeForce RTX 4070 Ti SUPER " % uuid)
    assert ", now reports %s NVIDIA GeForce RTX 4070 Ti SUPER X " % uuid in texts[0]


def test_other_cards_and_a_card_gone_are_named(tmp_path):
    before = gather(NVML / "node-b-2x4070tis.json")
    after = gather(NVML / "three-gpus.json")
    texts = maintenance.card_changes(before, after, "node-b")
    assert [t.split(":")[1].strip().split(" ")[1] for t in texts] == ["0", "1", "2"], texts
    assert texts[2].endswith(" is new")
    assert maintenance.card_changes(after, before, "node-b")[2].endswith(" is gone")


def test_the_filters_are_the_rules_and_refuse_what_is_not_a_fact():
    fact = gather(NVML / "node-b-2x4070tis.json")
    assert FILTERS["maintenance_card_changes"](fact, fact, "node-b") == []
    with pytest.raises(AnsibleFilterError, match="expected two pairserve_gpu facts"):
        FILTERS["maintenance_card_changes"]([], fact, "node-b")
    assert FILTERS["maintenance_host_problems"](["node-b"], NODES, SERVERS, "none") == []


def test_the_filters_run_in_ansible(tmp_path):
    fact = gather(NVML / "node-b-2x4070tis.json")
    res = run_local_play(tmp_path, "maintenance filters", [
        {"name": "host problems", "ansible.builtin.debug": {
            "msg": "{{ ['node-a', 'node-b'] | pairserve.llm.maintenance_host_problems(['node-a', 'node-b'], ['node-a'], "
                   "'reboot') }}"}},
        {"name": "card changes", "ansible.builtin.debug": {
            "msg": "{{ fact | pairserve.llm.maintenance_card_changes(fact, 'node-b') }}"}},
    ], play_vars={"fact": fact})
    assert res.rc == 0, res.stdout[-3000:]
    assert "run it with --limit <node>" in res.by_task["host problems"]["msg"][0]
    assert res.by_task["card changes"]["msg"] == []


def test_maintenance_mode_is_sent_only_when_it_changes():
    assert wanted_maintenance(None, True, "reboot") == {"enabled": True, "message": "reboot"}
    assert wanted_maintenance({"enabled": True, "message": "reboot"}, True, "reboot") is None
    want = {"enabled": True, "message": "reboot"}
    assert wanted_maintenance({"enabled": True, "message": "old"}, True, "reboot") == want
    assert wanted_maintenance({"enabled": True, "message": "reboot"}, False, "") == {"enabled": False, "message": None}
    assert wanted_maintenance({"enabled": False, "message": "left"}, False, "") is None
    assert wanted_maintenance(None, False, "") is None
