"""The checkpoint pin's one rule (test pairserve.llm.commit_sha) and its one help text (filter
pairserve.llm.commit_help), through Ansible's own templating as the roles use them, and the same rule as
hf_snapshot's and the validation play's."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.filter.commit_help import commit_help
from ansible_collections.pairserve.llm.plugins.module_utils import hub, inventory_check
from ansible_collections.pairserve.llm.plugins.test.commit_sha import commit_sha, hf_repo_id
from support.ansible_runner import run_playbook

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("value, ok", [
    (SHA, True),
    (SHA.upper(), False),      # the Hub's ids are lowercase; an uppercase copy is a typo to fix, not to guess
    (SHA[:12], False),         # a short sha is ambiguous
    (SHA + "0", False),
    ("main", False),           # a branch moves under a running service
    ("v1.0", False),
    ("", False),
    (None, False),
    (int("1" * 40), False),    # a YAML number, not a string
])
def test_only_a_full_lowercase_commit_sha_is_a_pin(value, ok):
    assert commit_sha(value) is ok
    # the same rule where the validation play checks the inventory, and where hf_snapshot pins
    found = inventory_check.problems({"node-a": {"pairserve_checkpoint_revision": value}},
                                     {"gpustack_server": ["node-a"], "gpu_nodes": ["node-a"]})
    assert any(p["variable"] == "pairserve_checkpoint_revision" for p in found) is not ok
    assert (isinstance(value, str) and bool(hub.COMMIT_RE.match(value))) is ok


def test_the_help_names_the_repository_and_is_hf_snapshots_text():
    text = commit_help("org/model")
    assert text == hub.how_to_find_commit("org/model")
    assert "hf models info org/model --revision main --expand sha" in text and "{repo}" not in text


@pytest.mark.parametrize("repo", ["", "no-slash", "a/b/c", None, "org/has space", "-org/name", "org/.name"])
def test_the_help_refuses_what_is_not_a_repository_id(repo):
    assert not hf_repo_id(repo)
    found = inventory_check.problems({"node-a": {"pairserve_checkpoint_repo": repo}},
                                     {"gpustack_server": ["node-a"], "gpu_nodes": ["node-a"]})
    assert any(p["variable"] == "pairserve_checkpoint_repo" for p in found)
    with pytest.raises(AnsibleFilterError, match="pairserve_checkpoint_repo"):
        commit_help(repo)


@pytest.mark.parametrize("repo", ["orcarouter/Qwen3.8-27B-Uncensored-NVFP4", "pairserve/tiny-qwen3", "a/b"])
def test_a_repository_id_is_org_slash_name(repo):
    assert hf_repo_id(repo) and commit_help(repo).count(repo) == 2


def test_a_play_refuses_a_branch_with_the_help_and_accepts_a_sha(tmp_path):
    book = tmp_path / "pin.yml"
    book.write_text("""---
- name: The pin as the roles check it
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Check the pin
      ansible.builtin.assert:
        that: revision is pairserve.llm.commit_sha
        fail_msg: "{{ 'org/model' | pairserve.llm.commit_help }}"
        quiet: true
""")
    ok = run_playbook(book, extra_vars={"revision": SHA})
    assert ok.rc == 0, ok.stdout[-2000:]
    refused = run_playbook(book, extra_vars={"revision": "main"})
    assert refused.rc != 0
    assert refused.result["msg"] == hub.how_to_find_commit("org/model"), refused.result
