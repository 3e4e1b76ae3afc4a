"""plugin_utils/role_defaults.py: a role's defaults read from the role's own file, the one way another role, a play
or a filter reads a default it does not own; a missing role or default is an error that names it."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.pairserve.llm.plugins.plugin_utils import role_defaults as _role_defaults
from support.ansible_runner import REPO


def test_the_defaults_are_the_roles_file_and_a_copy():
    want = yaml.safe_load((REPO / "roles" / "gpustack_worker" / "defaults" / "main.yml").read_text(encoding="utf-8"))
    got = _role_defaults.role_defaults("gpustack_worker")
    assert got == want and got["pairserve_gpustack_worker_metrics_port"] == want["pairserve_gpustack_worker_metrics_port"]
    got["pairserve_gpustack_worker_metrics_port"] = 1
    assert _role_defaults.role_defaults("pairserve.llm.gpustack_worker") == want  # the cache is not changed through it


def test_names_keep_only_those_and_an_unknown_one_is_named():
    got = _role_defaults.role_defaults("gpustack_server", ["pairserve_gpustack_api_port"])
    assert list(got) == ["pairserve_gpustack_api_port"] and isinstance(got["pairserve_gpustack_api_port"], int)
    assert _role_defaults.role_defaults("gpustack_server", "pairserve_gpustack_tls_port").keys() == {
        "pairserve_gpustack_tls_port"}
    with pytest.raises(_role_defaults.RoleDefaultsError, match="role gpustack_server has no default pairserve_gpustack_nope"):
        _role_defaults.role_defaults("gpustack_server", ["pairserve_gpustack_api_port", "pairserve_gpustack_nope"])


@pytest.mark.parametrize("role,words", [
    ("no_such_role", "role 'no_such_role' has no defaults file .*roles with defaults: .*gpustack_server"),
    ("../../etc", "'../../etc' is not a role of this collection"),
    ("community.general.foo", "is not a role of this collection"),
    (3, "a role name is a string, got int"),
])
def test_a_role_that_is_not_ours_is_refused_by_name(role, words):
    with pytest.raises(_role_defaults.RoleDefaultsError, match=words):
        _role_defaults.role_defaults(role)


def test_every_role_with_a_defaults_file_reads_as_a_mapping():
    roles = sorted(p.parent.parent.name for p in REPO.glob("roles/*/defaults/main.yml"))
    assert "firewall" in roles and len(roles) > 10
    for role in roles:
        assert isinstance(_role_defaults.role_defaults(role), dict), role
