"""playbooks/uninstall.yml: the refusal without confirmation before any host is contacted, the order of the removals,
what it keeps by default, and a way back for every role that installs something.

Read from `ansible-playbook --syntax-check` and `--list-tasks`, and from real runs against the example inventory,
whose hosts (192.0.2.0/24, TEST-NET-1) are never reached: the guard runs on the controller, before any connection.
The removal entry points that only touch files run for real on localhost, on paths under the test's tmp directory
(the others talk to GPUStack or systemd; not yet proved on the lab).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys

import pytest
import yaml

from support.ansible_runner import REPO, run_playbook

PLAYBOOK = "playbooks/uninstall.yml"
EXAMPLE = "inventory/example/hosts.yml"
GUARD = "pairserve.llm.uninstall : Refuse to run without pairserve_uninstall_confirm=yes"
CONFIRM_CHECK = "pairserve.llm.uninstall : Validating arguments against arg spec 'confirm'"

# The roles that change the nodes, so need a way back; each of the others only checks or reports, with the reason.
INSTALLS = {"checkpoint", "controller", "firewall", "gpustack_install", "gpustack_server", "gpustack_worker",
            "maintenance", "node_venv", "replica", "route", "runner_image", "server_backup", "verify"}
READ_ONLY = {
    "bench": "measures through the route; reports on the controller",
    "power": "samples the GPUs' power; reports on the controller",
    "preflight": "checks only",
    "uninstall": "checks before the removals, reports what was kept after them",
}
# Roles whose installs uninstall keeps on purpose (first-install.md, "Uninstall": the distribution packages).
KEPT = {
    "system_packages": "the Debian packages the other roles need (nginx, PostgreSQL, nftables, python3-venv)",
}
# Day-2 flows: what they change is the other roles' (their absent entry points remove it).
FLOWS = {
    "rebuild": "registrations (role replica) and the pairs record, which role replica's absent entry point removes",
    "rotation": "the server's secrets and TLS files (role gpustack_server's), the workers' CA (role gpustack_worker's)",
    "upgrade": "the installs of roles gpustack_install, gpustack_server, gpustack_worker and replica, which their absent "
               "entry points remove",
}


def ansible_playbook(*args: str, inventory: str = EXAMPLE, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", inventory, PLAYBOOK, *args],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=timeout,
                          env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                                   ANSIBLE_FORCE_COLOR="0"))


@functools.lru_cache(maxsize=None)
def listed_tasks() -> tuple[str, ...]:
    """Every task `--list-tasks` prints, in order, each as '<play hosts> | <task name>'."""
    run = ansible_playbook("--list-tasks")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    tasks, hosts = [], None
    for line in run.stdout.splitlines():
        play = re.match(r"^  play #\d+ \(([^)]*)\):", line)
        if play:
            hosts = play.group(1)
        task = re.match(r"^ {6}(\S.*?)\tTAGS: ", line)
        if task:
            tasks.append("%s | %s" % (hosts, task.group(1)))
    return tuple(tasks)


def position(role: str, entry: str = "absent") -> int:
    """Where the argument check of `role`'s entry point (its first task) comes in the listing."""
    check = "pairserve.llm.%s : Validating arguments against arg spec '%s'" % (role, entry)
    found = [i for i, task in enumerate(listed_tasks()) if check in task]
    assert len(found) == 1, (role, entry, found)
    return found[0]


def imported_entry_points() -> list[tuple[str, str]]:
    """(role, tasks_from) of every import_role/include_role of the playbook, in order."""
    found = []
    for play in yaml.safe_load((REPO / PLAYBOOK).read_text()):
        for task in play.get("tasks", []):
            for key in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                if key in task:
                    found.append((task[key]["name"].split(".")[-1], task[key].get("tasks_from", "main")))
    return found


def test_the_playbook_parses():
    run = ansible_playbook("--syntax-check")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def test_the_guard_comes_first_and_runs_on_the_controller():
    # Only the uninstall role's argument check (an action on the controller, no connection) comes before it.
    assert listed_tasks()[0].startswith("gpustack_server:gpu_nodes | " + CONFIRM_CHECK)
    assert listed_tasks()[1] == "gpustack_server:gpu_nodes | " + GUARD
    first = yaml.safe_load((REPO / PLAYBOOK).read_text())[0]
    assert first["gather_facts"] is False and first["any_errors_fatal"] is True
    assert [t["ansible.builtin.import_role"] for t in first["tasks"]] == [
        {"name": "pairserve.llm.uninstall", "tasks_from": "confirm"}]
    confirm = yaml.safe_load((REPO / "roles" / "uninstall" / "tasks" / "confirm.yml").read_text())
    guard = confirm[0]
    assert "pairserve.llm.uninstall : " + guard["name"] == GUARD and "ansible.builtin.assert" in guard
    assert guard["delegate_to"] == "localhost" and guard["run_once"] is True
    # Nothing in the guard play contacts a node: only checks on the controller.
    assert all(set(task) & {"ansible.builtin.assert"} and task.get("delegate_to") == "localhost"
               for task in confirm)


@pytest.mark.parametrize("extra", [
    [], ["--check"], ["-e", "pairserve_uninstall_confirm=no"], ["-e", "pairserve_uninstall_confirm=true"],
    ["-e", '{"pairserve_uninstall_confirm": true}'],
])
def test_without_the_confirmation_it_stops_at_the_guard_naming_the_variable(extra):
    run = ansible_playbook(*extra, timeout=60)
    out = re.sub(r"\s+", " ", run.stdout)
    assert run.returncode != 0, run.stdout[-3000:]
    # The guard is the only task that ran after the argument check, it failed, and it says what to add.
    ran = re.findall(r"^TASK \[(.*?)\]", run.stdout, re.M)
    assert len(ran) == 2 and ran[0].startswith(CONFIRM_CHECK) and ran[1] == GUARD, run.stdout[-3000:]
    assert "-e pairserve_uninstall_confirm=yes" in out and "Nothing was changed" in out
    # No node was contacted (the example's addresses would be unreachable) and no later play started.
    assert "UNREACHABLE" not in run.stdout and "unreachable=1" not in run.stdout
    assert len(re.findall(r"^PLAY \[", run.stdout, re.M)) == 1
    assert not re.search(r"changed=[1-9]", run.stdout)


def test_a_limit_is_refused_before_any_host_is_contacted():
    run = ansible_playbook("-e", "pairserve_uninstall_confirm=yes", "--limit", "node-b", timeout=60)
    out = re.sub(r"\s+", " ", run.stdout)
    assert run.returncode != 0 and "does not take --limit (node-b)" in out, run.stdout[-3000:]
    assert "UNREACHABLE" not in run.stdout and len(re.findall(r"^PLAY \[", run.stdout, re.M)) == 1


def test_the_removals_come_in_order():
    order = [("controller", "absent"), ("route", "absent"), ("replica", "absent"), ("runner_image", "absent"),
             ("gpustack_server", "absent_api_keys"), ("verify", "absent"), ("gpustack_worker", "absent"),
             ("maintenance", "absent"), ("server_backup", "absent"), ("gpustack_server", "absent"),
             ("gpustack_install", "absent"), ("node_venv", "absent"), ("checkpoint", "absent"),
             ("firewall", "absent")]  # last: nothing of the service is left on the node to guard
    positions = [position(role, entry) for role, entry in order]
    assert positions == sorted(positions), dict(zip(order, positions))
    # The route before the replicas (models) before the worker before the server, each on its hosts.
    tasks = listed_tasks()
    assert tasks[position("route")].startswith("gpustack_server | ")
    assert tasks[position("replica")].startswith("gpu_nodes | ")
    assert tasks[position("gpustack_worker")].startswith("gpu_nodes | ")
    assert tasks[position("gpustack_server")].startswith("gpustack_server | ")
    # The server's checks come before the first removal.
    assert tasks.index("gpustack_server | pairserve.llm.uninstall : Refuse to go on while the installed server does not "
                       "answer") < positions[0]
    # The uninstall role's own entry points: the checks before every removal, the report after.
    entries = imported_entry_points()
    assert [e for e in entries if e[0] != "uninstall"] == order
    own = [("uninstall", "confirm"), ("uninstall", "server"), ("uninstall", "kept")]
    assert [e for e in entries if e[0] == "uninstall"] == own
    assert entries[:2] == [("uninstall", "confirm"), ("uninstall", "server")] and entries[-1] == ("uninstall", "kept")


def test_every_role_that_installs_something_has_an_absent_entry_point_the_playbook_runs():
    # every role, with or without a main entry point (maintenance and upgrade have none)
    roles = {path.name for path in (REPO / "roles").iterdir() if (path / "tasks").is_dir()}
    known = INSTALLS | set(READ_ONLY) | set(KEPT) | set(FLOWS)
    assert roles == known, "classify the new role(s): %s" % sorted(roles ^ known)
    run = {role for role, entry in imported_entry_points() if entry == "absent"}
    for role in sorted(INSTALLS):
        assert (REPO / "roles" / role / "tasks" / "absent.yml").exists(), role
        specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        assert "absent" in specs, role
        assert role in run, role
    for role in set(READ_ONLY) | set(KEPT) | set(FLOWS):
        assert not (REPO / "roles" / role / "tasks" / "absent.yml").exists(), role


def test_the_checkpoint_the_database_and_the_dumps_are_kept_unless_asked():
    plays = yaml.safe_load((REPO / PLAYBOOK).read_text())
    tasks = [task for play in plays for task in play.get("tasks", [])]
    imports = [(t, t.get("ansible.builtin.import_role", {})) for t in tasks]
    checkpoint = [t for t, role in imports if role.get("name") == "pairserve.llm.checkpoint"]
    assert len(checkpoint) == 1
    assert "pairserve_uninstall_purge_checkpoint | default(false) | bool" in checkpoint[0]["when"]
    server = [t for t, role in imports
              if role.get("name") == "pairserve.llm.gpustack_server" and role.get("tasks_from") == "absent"]
    assert server[0]["vars"] == {
        "pairserve_gpustack_server_absent_database": "{{ pairserve_uninstall_purge_database | default(false) | bool }}",
        "pairserve_gpustack_server_absent_backups": "{{ pairserve_uninstall_purge_backups | default(false) | bool }}",
    }
    defaults = yaml.safe_load((REPO / "roles" / "gpustack_server" / "defaults" / "main.yml").read_text())
    assert defaults["pairserve_gpustack_server_absent_database"] is False
    assert defaults["pairserve_gpustack_server_absent_backups"] is False
    # The database drop names GPUStack's database and role, never the PostgreSQL server or its package.
    absent = yaml.safe_load((REPO / "roles" / "gpustack_server" / "tasks" / "absent.yml").read_text())
    modules = {key for task in absent for key in task if "." in key}
    assert {"community.postgresql.postgresql_db", "community.postgresql.postgresql_user"} <= modules
    assert not modules & {"ansible.builtin.apt", "ansible.builtin.package", "ansible.builtin.service"}


# -- the entry points that only touch files, for real on tmp paths --------------------------------------------------

def _absent(tmp_path, role, check=False, **host_vars):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": dict(
        ansible_connection="local", ansible_python_interpreter=sys.executable, **host_vars)}}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Absent entry point", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "The role's absent entry point",
         "ansible.builtin.include_role": {"name": "pairserve.llm." + role, "tasks_from": "absent"}}]}]))
    return run_playbook(playbook, inventory=inventory, check=check, timeout=300)


def _changed(res):
    return [r["_task"] for r in res.results if r.get("changed")]


@pytest.mark.parametrize("role, variable, path, parent_goes", [
    ("node_venv", "pairserve_node_venv", "opt/pairserve/venv", True),
    ("gpustack_install", "pairserve_gpustack_prefix", "opt/gpustack", False),
    ("checkpoint", "pairserve_checkpoint_cache_dir", "var/lib/pairserve/hf-cache", True),
])
def test_a_files_only_entry_point_removes_nothing_in_check_mode_then_all_then_nothing(
        tmp_path, role, variable, path, parent_goes):
    target = tmp_path / path
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "file").write_text("installed\n")
    check = _absent(tmp_path, role, check=True, **{variable: str(target)})
    assert check.rc == 0 and _changed(check), check.stdout[-3000:]
    assert (target / "sub" / "file").exists()
    first = _absent(tmp_path, role, **{variable: str(target)})
    assert first.rc == 0, first.stdout[-3000:]
    assert not target.exists()
    # The parent the venv or the cache was alone in goes too; the prefix's parent (/opt) is never the role's.
    assert target.parent.exists() is not parent_goes
    second = _absent(tmp_path, role, **{variable: str(target)})
    assert second.rc == 0 and _changed(second) == [], second.stdout[-3000:]


def test_a_parent_that_holds_something_else_stays(tmp_path):
    target = tmp_path / "var" / "lib" / "pairserve" / "hf-cache"
    target.mkdir(parents=True)
    (target.parent / "pairs.json").write_text("{}\n")
    res = _absent(tmp_path, "checkpoint", pairserve_checkpoint_cache_dir=str(target))
    assert res.rc == 0 and not target.exists() and (target.parent / "pairs.json").exists(), res.stdout[-3000:]


@pytest.mark.parametrize("role, variable", [("node_venv", "pairserve_node_venv"),
                                            ("gpustack_install", "pairserve_gpustack_prefix"),
                                            ("checkpoint", "pairserve_checkpoint_cache_dir")])
def test_a_path_one_level_deep_is_refused(tmp_path, role, variable):
    # A path that does not exist, in check mode: were the guard broken, nothing could be removed.
    res = _absent(tmp_path, role, check=True, **{variable: "/pairserve-uninstall-test"})
    assert res.rc != 0 and "at least two levels deep" in res.stdout, res.stdout[-3000:]
