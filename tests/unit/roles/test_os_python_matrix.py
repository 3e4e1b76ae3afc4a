"""The OS and Python matrix: preflight refuses every system but Debian 12, Ubuntu 22.04 and Ubuntu 24.04 in
its very first task, before anything else runs, and passes the three with the constraints file of their python3;
gpustack_install picks that file and refuses a wheelhouse built for another Python.

The plays run the real roles through ansible-playbook against localhost; only the facts of the system are faked
(task vars over `ansible_facts`), the commands preflight runs (df) are real.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from lab import pins
from support.ansible_runner import REPO, run_playbook

# A site's pins: the example inventory's versions and runner image (its placeholders replaced by valid values).
PINS = {
    **{name: pins.example()[name]
       for name in ("pairserve_gpustack_version", "pairserve_vllm_version", "pairserve_runner_image",
                    "pairserve_runtime_pause_image", "pairserve_runtime_health_image")},
    "pairserve_runner_image_digest": "sha256:" + "0" * 64, "pairserve_checkpoint_repo": "org/model",
    "pairserve_checkpoint_revision": "a" * 40, "pairserve_runtime_pause_image_digest": "sha256:" + "1" * 64,
    "pairserve_runtime_health_image_digest": "sha256:" + "2" * 64,
}
GS = PINS["pairserve_gpustack_version"]
SUPPORTED = "Debian 12, Ubuntu 22.04, Ubuntu 24.04"


def facts(distribution, version, release, python, executable="/usr/bin/python3"):
    """The facts preflight reads, as `setup` reports them on that system."""
    major, minor, micro = (int(p) for p in python.split("."))
    return {"distribution": distribution, "distribution_version": version,
            "distribution_major_version": version.split(".")[0], "distribution_release": release,
            "python_version": python,
            "python": {"executable": executable, "version": {"major": major, "minor": minor, "micro": micro}}}


SYSTEMS = {
    "debian-12": facts("Debian", "12.8", "bookworm", "3.11.2"),
    "ubuntu-22.04": facts("Ubuntu", "22.04", "jammy", "3.10.12"),
    "ubuntu-24.04": facts("Ubuntu", "24.04", "noble", "3.12.3"),
    "debian-13": facts("Debian", "13.1", "trixie", "3.13.5"),
    "rocky-9": facts("Rocky", "9.4", "Blue Onyx", "3.9.18"),
    "ubuntu-22.10": facts("Ubuntu", "22.10", "kinetic", "3.10.7"),
}


def play(tmp_path, role, system_facts, extra=None, tasks_from=None):
    """Run `role` on localhost with the faked facts; the run and the records of the role's own tasks."""
    book = tmp_path / "play.yml"
    include = {"name": role, **({"tasks_from": tasks_from} if tasks_from else {})}
    book.write_text(json.dumps([{
        "name": "Run the role on a faked system", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": "Include the role", "ansible.builtin.include_role": include,
                   "vars": {"ansible_facts": "{{ pairserve_test_facts }}"}}]}]))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n")
    run = run_playbook(book, inventory=inventory, extra_vars={
        "pairserve_test_facts": system_facts, **PINS, "pairserve_preflight_disk_path": str(tmp_path),
        "pairserve_preflight_min_free_gib": 0, "pairserve_preflight_require_time_sync": False, **(extra or {})})
    # Left out: the include itself and the role's argument validation (Ansible's implicit first task, changes nothing).
    return run, [r for r in run.results
                 if r["_task"] != "Include the role" and not r["_task"].startswith("Validating arguments against arg spec")]


def message(record):
    return re.sub(r"\s+", " ", record.get("msg", ""))


@pytest.mark.parametrize("system,python", [("debian-12", "3.11"), ("ubuntu-22.04", "3.10"), ("ubuntu-24.04", "3.12")])
def test_a_supported_system_passes_with_the_constraints_file_of_its_python(tmp_path, system, python):
    run, records = play(tmp_path, "pairserve.llm.preflight", SYSTEMS[system])
    assert run.rc == 0, run.stdout[-3000:]
    assert records[0]["_task"] == "Check the operating system" and records[0]["_status"] == "ok"
    venv = [r for r in records if r["_task"] == "Remember the Python GPUStack's venvs are built from"]
    assert venv[0]["ansible_facts"]["pairserve_preflight_venv_python"] == python
    checked = {r["_task"]: r["_status"] for r in records}
    assert checked["Check that the GPUStack version has a constraints file for the node's Python"] == "ok"
    assert checked["Ask the system python3 for its version"] == "skipped"  # the facts already say
    assert (REPO / "roles" / "gpustack_install" / "files" / f"py{python}" / f"gpustack-{GS}.constraints.txt").is_file()


@pytest.mark.parametrize("system,shown", [("debian-13", "Debian 13.1 (trixie, python3 3.13.5)"),
                                          ("rocky-9", "Rocky 9.4 (Blue Onyx, python3 3.9.18)"),
                                          ("ubuntu-22.10", "Ubuntu 22.10 (kinetic, python3 3.10.7)")])
def test_another_system_is_refused_by_the_first_task_before_anything_else(tmp_path, system, shown):
    run, records = play(tmp_path, "pairserve.llm.preflight", SYSTEMS[system])
    assert run.rc != 0
    # The first task of the role, and nothing after it: no command ran, no fact was set.
    assert [(r["_task"], r["_status"]) for r in records] == [("Check the operating system", "failed")], run.stdout[-3000:]
    text = message(records[0])
    assert text.startswith(f"localhost runs {shown}, which the collection does not support; supported: {SUPPORTED}")
    assert "Nothing was changed" in text and "pairserve_preflight_supported_os" in text


def test_debian_13_let_in_by_the_override_is_refused_for_its_python(tmp_path):
    run, records = play(tmp_path, "pairserve.llm.preflight", SYSTEMS["debian-13"],
                        {"pairserve_preflight_supported_os": ["Debian 12", "Debian 13"]})
    assert run.rc != 0
    failed = [r for r in records if r["_status"] == "failed"]
    assert [r["_task"] for r in failed] == ["Check the Python GPUStack's venvs are built from"], run.stdout[-3000:]
    assert "would be built from /usr/bin/python3, which is Python 3.13" in message(failed[0])
    assert "support Python 3.10, 3.11, 3.12" in message(failed[0])


def test_modules_on_another_interpreter_ask_the_system_python3(tmp_path):
    """ansible_python_interpreter elsewhere: the facts describe that one, so the system python3 is asked."""
    system = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    run, records = play(tmp_path, "pairserve.llm.preflight",
                        facts("Ubuntu", "24.04", "noble", "3.12.3", executable="/opt/python/bin/python3.12"))
    asked = [r for r in records if r["_task"] == "Ask the system python3 for its version"]
    assert asked and asked[0]["_status"] == "ok" and asked[0]["stdout"] == system
    venv = [r for r in records if r["_task"] == "Remember the Python GPUStack's venvs are built from"]
    assert venv[0]["ansible_facts"]["pairserve_preflight_venv_python"] == system
    assert (run.rc == 0) == (system in ("3.10", "3.11", "3.12")), run.stdout[-3000:]


def test_gpustack_install_names_the_python_without_a_constraints_file(tmp_path):
    run, records = play(tmp_path, "pairserve.llm.gpustack_install", SYSTEMS["debian-13"],
                        {"pairserve_gpustack_prefix": str(tmp_path / "opt")}, tasks_from="preflight")
    assert run.rc != 0
    failed = [r for r in records if r["_status"] == "failed"]
    assert [r["_task"] for r in failed] == ["Check that the GPUStack version has a constraints file for this Python"]
    text = message(failed[0])
    assert "would be built from its system python3, Python 3.13, and there is no" in text
    assert f"files/py3.13/gpustack-{GS}.constraints.txt (GPUStack {GS} has one for Python 3.10, 3.11, 3.12)" in text


@pytest.mark.parametrize("built_for,refused", [("3.12", False), ("3.11", True), (None, False)])
def test_gpustack_install_refuses_a_wheelhouse_of_another_python(tmp_path, built_for, refused):
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    if built_for:
        (wheelhouse / "pairserve-wheelhouse.json").write_text(json.dumps(
            {"gpustack": GS, "python": built_for, "constraints": f"py{built_for}/gpustack-{GS}.constraints.txt"}))
    run, records = play(tmp_path, "pairserve.llm.gpustack_install", SYSTEMS["ubuntu-24.04"],
                        {"pairserve_gpustack_prefix": str(tmp_path / "opt"),
                         "pairserve_gpustack_wheelhouse": str(wheelhouse)}, tasks_from="preflight")
    install = [r for r in records if "pairserve_gpustack_install" in r.get("ansible_facts", {})]
    assert install[0]["ansible_facts"]["pairserve_gpustack_install"]["constraints"] == \
        f"py3.12/gpustack-{GS}.constraints.txt"
    check = [r for r in records if r["_task"] == "Refuse a wheelhouse built for another GPUStack version or Python"]
    assert check[0]["_status"] == ("failed" if refused else "skipped" if built_for is None else "ok"), run.stdout[-3000:]
    assert (run.rc != 0) == refused
    if refused:
        assert f"was built for GPUStack {GS} on Python 3.11 (its pairserve-wheelhouse.json), but this node installs" \
               f" GPUStack {GS} with Python 3.12" in message(check[0])
        assert f"tools/build_wheelhouse.sh --python 3.12 {GS}" in message(check[0])
