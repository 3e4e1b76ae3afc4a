"""One owner for the layout of the checkpoint cache: plugins/module_utils/hub.py.

The roles and plays take the paths of a checkpoint (its snapshot, the export a replica mounts, the restart mark)
from module hf_snapshot's result or from the filter pairserve.llm.checkpoint_paths, both over hub.checkpoint_paths;
a second rule in Jinja (the folder name models--ORG--NAME, the pairserve/ folder's members) would drift from it.
"""

from __future__ import annotations

import re

import yaml

from support.ansible_runner import REPO

# What only the layout's owner may spell: the repository folder rule and the names inside it.
LAYOUT = re.compile(r"models--|replace\(\s*['\"]/['\"]\s*,\s*['\"]--['\"]\s*\)|restart-pending|/export/|/snapshots/")


def product_yaml():
    for pattern in ("roles/**/*.yml", "playbooks/**/*.yml", "site.yml", "molecule/**/*.yml"):
        yield from sorted(REPO.glob(pattern))


def test_no_role_or_play_builds_a_cache_path():
    found = []
    for path in product_yaml():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            if LAYOUT.search(line):
                found.append("%s:%d: %s" % (path.relative_to(REPO), number, line.strip()))
    assert found == [], "use hf_snapshot's result or the filter pairserve.llm.checkpoint_paths:\n" + "\n".join(found)


def test_the_checkpoint_role_takes_its_paths_from_hf_snapshot():
    tasks = yaml.safe_load((REPO / "roles/checkpoint/tasks/configure.yml").read_text())
    export = [t for t in tasks if "pairserve.llm.hf_snapshot" in t and t["pairserve.llm.hf_snapshot"].get("export")]
    assert len(export) == 1 and "export_dir" not in export[0]["pairserve.llm.hf_snapshot"]
    register = export[0]["register"]
    mark = [t for t in tasks if "ansible.builtin.copy" in t][0]["ansible.builtin.copy"]["dest"]
    assert mark == "{{ %s.restart_marker }}" % register
    fact = [t for t in tasks if "ansible.builtin.set_fact" in t][-1]["ansible.builtin.set_fact"]["pairserve_checkpoint"]
    assert fact["path"] == "{{ %s.path }}" % register
    assert fact["restart_marker"] == "{{ %s.restart_marker }}" % register
