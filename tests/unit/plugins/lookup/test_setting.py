"""Lookup pairserve.llm.setting through real Ansible: the host's value when it has one, else the default of the role
that owns the variable (templated where it is read); a variable no role defines is an error naming it. And the rule
behind it (plugin_utils/role_defaults.owner_default): the roles that define one variable agree on its default."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.plugin_utils import role_defaults
from support.ansible_runner import run_local_play


def _show(name):
    return {"name": name, "ansible.builtin.debug": {"msg": "{{ lookup('pairserve.llm.setting', '%s') }}" % name}}


def test_the_hosts_value_else_the_owning_roles_default(tmp_path):
    res = run_local_play(tmp_path, "setting", [
        _show("pairserve_gpustack_worker_port"), _show("pairserve_gpustack_prefix"),
        _show("pairserve_rotation_secrets_dir"), _show("pairserve_gpustack_nothing")],
        {"pairserve_gpustack_prefix": "/srv/gpustack", "pairserve_gpustack_secrets_dir": "/etc/site/secrets"})
    assert res.by_task["pairserve_gpustack_worker_port"]["msg"] == 10150  # role gpustack_worker's
    assert res.by_task["pairserve_gpustack_prefix"]["msg"] == "/srv/gpustack"  # the play's
    # role rotation's default is a template over the server role's variable: templated where it is read
    assert res.by_task["pairserve_rotation_secrets_dir"]["msg"] == "/etc/site/secrets"
    assert res.rc != 0
    assert ("pairserve.llm.setting: no role of this collection has a default for pairserve_gpustack_nothing"
            in res.by_task["pairserve_gpustack_nothing"]["msg"])


def test_roles_that_define_one_variable_agree_on_its_default():
    roles, value = role_defaults.owner_default("pairserve_gpustack_prefix")
    assert set(roles) >= {"gpustack_install", "gpustack_server", "gpustack_worker"} and value == "/opt/gpustack"
    names = set()
    for role in role_defaults.roles_with_defaults():
        names |= set(role_defaults.role_defaults(role))
    for name in sorted(names):  # raises, naming the roles, on a default that differs between two of them
        role_defaults.owner_default(name)


def test_disagreeing_defaults_are_named(monkeypatch, tmp_path):
    for role, value in (("one", 1), ("two", 2)):
        (tmp_path / role / "defaults").mkdir(parents=True)
        (tmp_path / role / "defaults" / "main.yml").write_text("pairserve_x: %d\n" % value)
    monkeypatch.setattr(role_defaults, "ROLES", tmp_path)
    role_defaults.clear_cache()
    try:
        with pytest.raises(role_defaults.RoleDefaultsError, match="disagree on its default: one 1, two 2"):
            role_defaults.owner_default("pairserve_x")
    finally:
        role_defaults.clear_cache()


def test_the_roles_are_read_once_for_every_lookup(monkeypatch, tmp_path):
    (tmp_path / "one" / "defaults").mkdir(parents=True)
    (tmp_path / "one" / "defaults" / "main.yml").write_text("pairserve_x: 1\npairserve_y: 2\n")
    monkeypatch.setattr(role_defaults, "ROLES", tmp_path)
    role_defaults.clear_cache()
    try:
        assert role_defaults.owner_default("pairserve_x") == (["one"], 1)
        # a role added after the first lookup is not seen: the roles were listed and read once
        (tmp_path / "two" / "defaults").mkdir(parents=True)
        (tmp_path / "two" / "defaults" / "main.yml").write_text("pairserve_z: 3\n")
        assert role_defaults.owner_default("pairserve_y") == (["one"], 2)
        with pytest.raises(role_defaults.RoleDefaultsError, match="no role of this collection has a default for pairserve_z"):
            role_defaults.owner_default("pairserve_z")
    finally:
        role_defaults.clear_cache()
