"""Tags: `site.yml --tags <step>` runs that step and what it needs, nothing else; every tag the docs name exists.

Read from `ansible-playbook --list-tasks`, which contacts no host (the example inventory's addresses are never
reached). Dynamic includes show as their include task only; the lab proves the run itself.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess

import pytest

from support.ansible_runner import REPO

# The tasks that run whatever --tags selects, besides each role's argument check (Ansible tags it `always`).
ALWAYS = {
    "Read what this host's variables say (no connection to the host)",
    "Check the GPUStack server's HTTPS certificate and key",
    "Check the admin password against the pinned GPUStack's rule",
    "Check every host's view at once",
    "Stop when the inventory has problems, listing every one",
    "pairserve.llm.node_venv : Publish the node venv's interpreter",
    "Find the GPU pairs",
    # Check mode before the GPUStack server first runs: the plays that need it end for each host (a no-op otherwise).
    "Leave out what needs a running GPUStack server (check mode before its first start)",
}
ARGUMENT_CHECK = "Validating arguments against arg spec"


@functools.lru_cache(maxsize=None)
def ansible_playbook(*args: str) -> str:
    run = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/example/hosts.yml",
                          "site.yml", *args], cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
                         env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run.stdout


def listed_tasks(*args: str) -> list[tuple[str, set[str]]]:
    """(task name, its tags) of every task `--list-tasks` prints, in order."""
    tasks = []
    for line in ansible_playbook("--list-tasks", *args).splitlines():
        match = re.match(r"^ {6}(\S.*?)\tTAGS: \[(.*)\]$", line)
        if match:
            tasks.append((match.group(1), {t.strip() for t in match.group(2).split(",") if t.strip()}))
    return tasks


def role_tasks(role: str) -> set[str]:
    """The tasks of `role` in the full listing, its argument check left out."""
    prefix = "pairserve.llm.%s : " % role
    return {name for name, dummy in listed_tasks() if name.startswith(prefix) and ARGUMENT_CHECK not in name}


def split(tasks):
    always = {name for name, tags in tasks if "always" in tags and ARGUMENT_CHECK not in name}
    chosen = {name for name, tags in tasks if "always" not in tags}
    return always, chosen


def test_tags_checkpoint_lists_the_checkpoint_tasks_and_the_always_ones_only():
    always, chosen = split(listed_tasks("--tags", "checkpoint"))
    assert always == ALWAYS
    assert chosen == role_tasks("checkpoint")
    assert "pairserve.llm.checkpoint : Remove the persisted 2048-token truncation from the tokenizer" in chosen


def test_tags_route_lists_the_route_tasks_what_they_need_and_the_always_ones_only():
    always, chosen = split(listed_tasks("--tags", "route"))
    assert always == ALWAYS
    needs = {
        # The server's keys (the control-plane play is skipped) and every node's replica names (the replica role is).
        "Read the GPUStack server's address and keys",
        "Name this node's replicas for the route",
        # The controller steers the route: removed or installed with it, as the inventory says.
        "Remove the controller an earlier run installed",
        "Install and run the controller",
    }
    assert chosen == role_tasks("route") | needs
    assert len(role_tasks("route")) > 5


def test_every_task_of_the_site_belongs_to_a_step():
    # A task added without a tag would run under no --tags and be left out by every one.
    untagged = [name for name, tags in listed_tasks() if not tags - {"always"} and name not in ALWAYS]
    assert not untagged


def site_tags() -> set[str]:
    # One line per play: the play's own tags, then its tasks' tags.
    found = re.findall(r"TAGS: \[(.*)\]", ansible_playbook("--list-tags"))
    assert len(found) >= 20
    return {tag.strip() for line in found for tag in line.split(",") if tag.strip()} - {"always"}


def documented_tags() -> list[str]:
    text = (REPO / "docs" / "first-install.md").read_text()
    section = text.split("## Re-running one part", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)


def test_the_documented_tags_are_the_site_tags():
    documented = documented_tags()
    assert len(documented) >= 8
    assert set(documented) == site_tags()


def test_the_readme_points_at_the_tags():
    readme = (REPO / "README.md").read_text()
    assert "--tags" in readme and "first-install.md#re-running-one-part" in readme


@pytest.mark.parametrize("tag", ["preflight", "gpu_pairs", "control_plane", "checkpoint", "runner_image",
                                 "replicas", "route", "verify"])
def test_each_step_has_its_tag(tag):
    assert tag in site_tags()
