"""The docs and the playbooks' usage comments call the user's inventory by one name, inventory/mysite.

Other inventories a command may name: the lab's (lab/inventory), the recorded hosts, which replay the seed's
GPUs and need no machine (inventory/recorded/hosts.yml), and the example only where it is run literally by a
command that contacts no host (--list-tasks, --list-hosts, --syntax-check).
"""

from __future__ import annotations

import re

import pytest

from support.ansible_runner import REPO

INVENTORY_ARG = re.compile(r"(?:-i|--inventory)[ =]+(inventory/\S*)")
ALLOWED = re.compile(r"inventory/(mysite|lab|recorded/hosts\.yml)(/|\b)")
NO_HOST_CONTACTED = re.compile(r"--(list-tasks|list-hosts|list-tags|syntax-check)\b")


def files():
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "playbooks").rglob("*.yml"))]


def wrong_names(text: str) -> list[str]:
    """The `-i inventory/...` arguments of `text` that name neither the user's inventory nor an allowed one."""
    wrong = []
    for line in text.splitlines():
        for match in INVENTORY_ARG.finditer(line):
            name = match.group(1).rstrip("`'\",;).")
            if ALLOWED.match(name):
                continue
            if name.startswith("inventory/example") and NO_HOST_CONTACTED.search(line):
                continue
            wrong.append(name)
    return wrong


def test_docs_and_playbooks_name_the_users_inventory_inventory_mysite():
    problems = [f"{path.relative_to(REPO)}: -i {name}" for path in files() for name in wrong_names(path.read_text())]
    assert not problems, "use -i inventory/mysite for the user's inventory:\n" + "\n".join(problems)


def test_the_scan_reads_the_files_that_name_inventories():
    # A scan that finds nothing passes anything: make sure it sees the README's and first-install's commands.
    seen = {str(path.relative_to(REPO)): INVENTORY_ARG.findall(path.read_text()) for path in files()}
    assert "inventory/mysite" in seen["README.md"] and "inventory/mysite" in seen["docs/first-install.md"]
    assert sum(len(names) for names in seen.values()) > 20


@pytest.mark.parametrize("line, wrong", [
    ("ansible-playbook -i inventory/mine site.yml", ["inventory/mine"]),
    ("ansible-playbook -i inventory/<yours> site.yml", ["inventory/<yours>"]),
    ("ansible-playbook -i inventory/example playbooks/verify.yml   # your nodes", ["inventory/example"]),
    ("ansible-playbook --inventory=inventory/example/hosts.yml site.yml", ["inventory/example/hosts.yml"]),
    ("`-i inventory/mysite` (a forgotten -i targets no host)", []),
    ("ansible-playbook -i inventory/mysite/hosts.yml site.yml", []),
    ("ansible-playbook -i lab/inventory/hosts.yml site.yml", []),
    ("ansible-playbook -i inventory/recorded/hosts.yml playbooks/detect.yml", []),
    ("ansible-playbook -i inventory/recordedx playbooks/detect.yml", ["inventory/recordedx"]),
    ("ansible-playbook -i inventory/example/hosts.yml site.yml --list-tasks --tags route", []),
])
def test_the_check_tells_the_allowed_names_from_the_others(line, wrong):
    assert wrong_names(line) == wrong
