"""plugins/module_utils/replica_names.py, the replica name's one owner: names per pair, the pattern, which host a name
belongs to, pair indexes and names two hosts could share; its filters through Ansible, and a guard that the rule is
written nowhere else in the product."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import replica_names as naming
from support.ansible_runner import run_local_play

REPO = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("pair, name", [(0, "qwen-node-a"), (1, "qwen-node-a-p1"), ("12", "qwen-node-a-p12"),
                                        (None, "qwen-node-a")])
def test_one_name_per_pair(pair, name):
    assert naming.replica_name("qwen", "node-a", pair) == name
    assert naming.owned_by(name, "qwen", "node-a") and naming.base_name(name) == "qwen-node-a"


@pytest.mark.parametrize("name, host", [
    ("qwen-node-b", "node-b"), ("qwen-node-b-p3", "node-b"), ("qwen-node-bb", None), ("qwen-node-b-px", None),
    ("other-node-b", None), ("qwen.node-b", None),
])
def test_a_name_belongs_to_its_host_and_no_other(name, host):
    assert naming.host_of(name, "qwen", ["node-a", "node-b"]) == host


def test_a_host_named_like_anothers_pair_is_ambiguous_not_guessed():
    # node-b-p1 is a legal host name: its first replica, qwen-node-b-p1, is also node-b's second one
    assert naming.host_of("qwen-node-b-p1", "qwen", ["node-b", "node-b-p1"]) is None
    assert naming.host_of("qwen-node-b", "qwen", ["node-b", "node-b-p1"]) == "node-b"


def test_the_filters_run_in_a_play(tmp_path):
    facts = run_local_play(tmp_path, "Replica name filters", [
        {"name": "Name", "ansible.builtin.set_fact": {"name": "{{ 'qwen' | pairserve.llm.replica_name('node-a', 1) }}"}},
        {"name": "Mine", "ansible.builtin.set_fact": {
            "mine": "{{ ['qwen-node-a', 'qwen-node-a-p1', 'qwen-node-ab', 'qwen-node-b'] | select('match', "
                    "'qwen' | pairserve.llm.replica_name_pattern('node-a')) | list }}"}},
        {"name": "Refused", "ansible.builtin.set_fact": {"bad": "{{ '' | pairserve.llm.replica_name('node-a') }}"},
         "ignore_errors": True},
    ]).by_task
    assert facts["Name"]["ansible_facts"]["name"] == "qwen-node-a-p1"
    assert facts["Mine"]["ansible_facts"]["mine"] == ["qwen-node-a", "qwen-node-a-p1"]
    assert facts["Refused"]["_status"] == "failed" and "needs the model name" in facts["Refused"]["msg"]


def test_the_rule_is_written_nowhere_else_in_the_product():
    """Issue 39: the name was built in five places. Any new `-p<N>` suffix or `<model>-<host>` join in the product's
    code fails here; use the filters or module_utils/replica_names.py."""
    suffix = re.compile(r"-p\[0-9\]|'-p' ~|\"-p%d\"|-p%s")
    join = re.compile(r"pairserve_model_name[^\n]{0,40}~ '-' ~|model_name\), re\.escape|\"%s-%s\" % \((view\.get\(\""
                      r"pairserve_model_name\"\)|model), host\)")
    found = []
    for path in list((REPO / "plugins").rglob("*.py")) + list((REPO / "roles").rglob("*.yml")) + \
            list((REPO / "playbooks").rglob("*.yml")):
        if path.name == "replica_names.py" and path.parent.name == "module_utils":
            continue
        text = path.read_text(encoding="utf-8")
        if suffix.search(text) or join.search(text):
            found.append(str(path.relative_to(REPO)))
    assert not found, found


def test_the_pair_of_a_replica_name_and_names_that_two_hosts_could_share():
    assert naming.pair_of("qwen-node-c", "qwen", "node-c") == 0
    assert naming.pair_of("qwen-node-c-p1", "qwen", "node-c") == 1
    assert naming.pair_of("qwen-node-c-p12", "qwen", "node-c") == 12
    assert naming.pair_of("qwen-node-cc", "qwen", "node-c") is None
    # node-b-p1's first replica is node-b's second one; node-b and node-bb share nothing
    assert naming.conflicts("qwen", "node-b", "qwen", "node-b-p1") and naming.conflicts("qwen", "node-b-p1", "qwen", "node-b")
    assert not naming.conflicts("qwen", "node-b", "qwen", "node-bb")
    # other model names can meet too: qwen-x with host b and qwen with host x-b
    assert naming.conflicts("qwen-x", "b", "qwen", "x-b")
    assert not naming.conflicts("qwen", "node-b", "other", "node-b")


def test_the_pattern_escapes_model_and_host_and_matches_whole_names_only():
    pattern = naming.pattern("qwen3.5", "node.a")
    assert pattern == r"^qwen3\.5-node\.a(-p[0-9]+)?\Z"
    assert re.match(pattern, "qwen3.5-node.a-p2") and re.match(pattern, "qwen3.5-node.a")
    # a dot in the model or host name is literal, not "any character"
    assert not re.match(pattern, "qwen3x5-node.a") and not re.match(pattern, "qwen3.5-nodeXa")
    assert not re.match(pattern, "qwen3.5-node.a-p") and not re.match(pattern, "qwen3.5-node.a-p1-old")
    assert not re.match(pattern, "qwen3.5-node.a\n") and not re.match(pattern, "qwen3.5-node.a-p1\n")


def test_base_name_drops_only_a_trailing_pair_suffix_and_none_is_no_replica():
    assert naming.base_name("qwen-node-a-p3") == "qwen-node-a"
    assert naming.base_name("qwen-node-a") == "qwen-node-a"
    assert naming.base_name("qwen-p1-node-a") == "qwen-p1-node-a"  # a -p<N> inside the name stays
    assert naming.owned_by(None, "qwen", "node-a") is False
    assert naming.host_of("qwen-node-a", "qwen", []) is None
    assert naming.pair_of("qwen-node-a-p07", "qwen", "node-a") == 7
