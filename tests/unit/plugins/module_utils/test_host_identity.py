"""Two inventory hosts reaching one machine are refused naming both: by address and port in the validation play, by
/etc/machine-id in the preflight role (module_utils/host_identity.py)."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import host_identity as hi
from ansible_collections.pairserve.llm.plugins.module_utils.inventory_check import problems
from support import inventory_views


@pytest.mark.parametrize("a,b,same", [
    ({"ansible_host": "10.0.0.5"}, {"ansible_host": "10.0.0.5"}, True),
    ({"ansible_host": "10.0.0.5"}, {"ansible_host": "10.0.0.5", "ansible_port": 22}, True),  # ssh's default port
    ({"ansible_host": "10.0.0.5", "ansible_port": "2222"}, {"ansible_host": "10.0.0.5", "ansible_port": 2222}, True),
    ({"ansible_host": "localhost"}, {"ansible_host": "127.0.0.1"}, True),
    ({"ansible_host": "127.0.0.1", "ansible_port": 2222}, {"ansible_host": "127.0.0.1", "ansible_port": 2223}, False),  # the lab
    ({"ansible_host": "10.0.0.5"}, {"ansible_host": "10.0.0.6"}, False),
    ({}, {}, False),  # no ansible_host: each host by its own name
    ({"ansible_connection": "local"}, {"ansible_connection": "ansible.builtin.local"}, True),
])
def test_same_machine(a, b, same):
    found = hi.same_machine_problems({"node-a": a, "node-b": b}, ["node-a", "node-b"])
    assert [item[:2] for item in found] == ([("node-b", "ansible_host")] if same else [])
    if same:
        assert "same machine as node-a" in found[0][2]


def test_the_validation_play_rule_names_both_hosts():
    found = problems(inventory_views.views(node_a={"ansible_host": "gpu1.example", "ansible_port": 22},
                                           node_b={"ansible_host": "GPU1.example"}),
                     inventory_views.GROUPS, inventory_views.CONSTRAINTS)
    assert [(p["host"], p["variable"]) for p in found] == [("node-b", "ansible_host")]
    assert "node-b: ansible_host: reaches the same machine as node-a: gpu1.example port 22 (ssh)" in found[0]["text"]


def test_machine_ids():
    assert hi.machine_id_problems({"node-a": "abc", "node-b": "def"}) == []
    assert hi.machine_id_problems({"node-a": "", "node-b": ""}) == []  # containers without one
    found = hi.machine_id_problems({"node-b": "abc\n", "node-a": "abc"})
    assert [item[:2] for item in found] == [("node-b", "ansible_host")] and "node-a" in found[0][2]
