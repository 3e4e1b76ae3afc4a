"""The lab's inventory differs from the example a site starts from only by variables docs/lab.md names, each with its
reason: a variable the lab sets for a real node's need would otherwise hide a gap in the product."""

from __future__ import annotations

import re
import subprocess

import yaml

from support.ansible_runner import REPO

LAB, EXAMPLE = REPO / "lab" / "inventory", REPO / "inventory" / "example"
SECTION = "### Every variable the lab's inventory sets that a site's does not"


def _hosts_vars(tree, out):
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "vars" and isinstance(value, dict):
                out.update(value)
            elif key == "hosts" and isinstance(value, dict):
                for host in value.values():
                    out.update(host or {})
            else:
                _hosts_vars(value, out)


def tracked(inventory):
    """The inventory's files in git: the ones the lab writes while it runs (lab_hub.yml, runner_digest.yml)
    are not there on a fresh checkout."""
    out = subprocess.run(["git", "ls-files", "--", str(inventory.relative_to(REPO))], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return [REPO / line for line in out.splitlines() if line.endswith(".yml")]


def names(inventory):
    """Every variable an inventory sets: group_vars, host_vars and hosts.yml (the upgrade scenario's pins aside)."""
    found = {}
    for path in sorted(tracked(inventory)):
        if "upgrade" in path.relative_to(inventory).parts:
            continue
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if path.name == "hosts.yml":
            _hosts_vars(data, found)
        elif isinstance(data, dict):
            found.update(data)
    return set(found)


def test_every_variable_only_the_lab_sets_is_in_the_stand_in_list():
    doc = (REPO / "docs" / "lab.md").read_text(encoding="utf-8")
    assert SECTION in doc
    section = doc.split(SECTION, 1)[1].split("\n#", 1)[0]
    listed = set(re.findall(r"`((?:ansible|pairserve)_[a-z0-9_]+)`", section))
    only_lab = names(LAB) - names(EXAMPLE)
    assert len(only_lab) > 20, only_lab
    assert sorted(only_lab - listed) == [], "set by lab/inventory, not explained in docs/lab.md"
    # and the list names nothing the lab no longer sets (the lab writes the hub's variables while it runs)
    written = "".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "lab").rglob("*.py")))
    assert sorted(v for v in listed - only_lab if v not in written) == []


def test_the_lab_sets_none_of_the_runtime_settings_the_product_owns():
    from ansible_collections.pairserve.llm.plugins.module_utils.container_runtime import OWNED_WORKER_ENV

    env = {}
    for path in tracked(LAB):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if isinstance(data, dict):
            env.update(data.get("pairserve_gpustack_worker_env") or {})
    assert env and not set(env) & set(OWNED_WORKER_ENV), sorted(env)
