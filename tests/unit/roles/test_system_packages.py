"""roles/system_packages, the one way the collection's roles install Debian packages: dpkg is asked first and apt
runs only for what is missing (a node that has everything never calls apt, so an offline node behaves the same in
every role), check mode reports what it would install and installs nothing, and the fact
pairserve_system_packages_installed says what a run installed. No other role calls ansible.builtin.apt.

The plays run the real role through ansible-playbook against this machine (Debian 12): git and make are installed
here, cowsay is not (it is in Debian's lists; check mode only asks apt whether it could install it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from support.ansible_runner import REPO, run_playbook

PRESENT = ["git", "make"]
ABSENT = "cowsay"


def play(tmp_path: Path, packages: list[str], check: bool = False):
    book = tmp_path / "play.yml"
    book.write_text(json.dumps([{
        "name": "Install what is missing", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": "The role", "ansible.builtin.import_role": {"name": "pairserve.llm.system_packages"},
                   "vars": {"pairserve_system_packages": packages}}]}]))
    run = run_playbook(book, inventory="localhost,", check=check)
    by_task = {r["_task"]: r for r in run.results}
    return run, by_task


def installed(package: str) -> bool:
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", package], capture_output=True, text=True,
                          check=False)
    return proc.stdout.startswith("ii")


def test_installed_packages_never_reach_apt(tmp_path):
    assert all(installed(p) for p in PRESENT)
    run, by_task = play(tmp_path, PRESENT)
    assert run.rc == 0, run.stdout[-3000:]
    assert by_task["Install the packages that are missing"]["_status"] == "skipped"
    assert by_task["Note the packages this run installed (or would install, in check mode)"]["ansible_facts"] == {
        "pairserve_system_packages_installed": []}
    assert not run.changed


def test_check_mode_reports_a_missing_package_and_installs_nothing(tmp_path):
    assert not installed(ABSENT)
    run, by_task = play(tmp_path, PRESENT + [ABSENT], check=True)
    assert run.rc == 0, run.stdout[-3000:]
    apt = by_task["Install the packages that are missing"]
    assert apt["changed"] is True and apt["invocation"]["module_args"]["name"] == [ABSENT], apt
    assert by_task["Note the packages this run installed (or would install, in check mode)"]["ansible_facts"] == {
        "pairserve_system_packages_installed": [ABSENT]}
    assert not installed(ABSENT)


def test_an_empty_list_asks_nothing(tmp_path):
    run, by_task = play(tmp_path, [])
    assert run.rc == 0, run.stdout[-3000:]
    assert by_task["Ask dpkg which of the packages are installed"]["_status"] == "skipped"
    assert by_task["Install the packages that are missing"]["_status"] == "skipped"


def test_no_other_role_calls_apt():
    callers = []
    for path in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        if path.parts[-3] == "system_packages":
            continue

        def walk(node, where=path):
            if isinstance(node, dict):
                if any(k in node for k in ("ansible.builtin.apt", "apt", "ansible.builtin.package", "package")):
                    callers.append("%s: %s" % (where.relative_to(REPO), node.get("name")))
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)
        walk(yaml.safe_load(path.read_text()))
    assert callers == [], "install system packages through roles/system_packages: %s" % callers
