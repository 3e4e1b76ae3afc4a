"""Which role includes which (include_role, import_role and meta dependencies, in every task file of every role),
and the cycles among them: a role that includes a role that includes it back hides the order of a day-2 play
inside the roles (issue 39). The playbooks list their roles in order instead; the test fails on any cycle.

The graph is printed with -s: `pytest -s tests/unit/roles/test_role_includes.py`.
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PREFIX = "pairserve.llm."
INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role")


def _walk(node, found: set) -> None:
    if isinstance(node, dict):
        for key in INCLUDES:
            spec = node.get(key)
            if isinstance(spec, dict) and str(spec.get("name", "")).startswith(PREFIX):
                found.add(spec["name"][len(PREFIX):])
        for value in node.values():
            _walk(value, found)
    elif isinstance(node, list):
        for value in node:
            _walk(value, found)


def graph() -> dict:
    """{role: {role it includes or depends on}}, a role's includes of its own entry points left out."""
    edges = {}
    for role_dir in sorted(p for p in (REPO / "roles").iterdir() if p.is_dir()):
        found = set()
        for path in sorted((role_dir / "tasks").glob("*.yml")):
            _walk(yaml.safe_load(path.read_text(encoding="utf-8")), found)
        meta = role_dir / "meta" / "main.yml"
        if meta.exists():
            for dep in (yaml.safe_load(meta.read_text(encoding="utf-8")) or {}).get("dependencies") or []:
                name = dep.get("role", dep.get("name")) if isinstance(dep, dict) else dep
                found.add(str(name).removeprefix(PREFIX))
        found.discard(role_dir.name)
        edges[role_dir.name] = found
    return edges


def cycles(edges: dict) -> list:
    """The strongly connected components of more than one role (Tarjan's algorithm), each a set."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(component)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


def test_the_walk_finds_includes_and_cycles():
    # The walk itself, on a graph of its own: a cycle of three, a role outside it, a self-include left out.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []
    found = set()
    _walk([{"block": [{"ansible.builtin.include_role": {"name": "pairserve.llm.replica", "tasks_from": "x"}}]},
           {"ansible.builtin.import_role": {"name": "other.collection.role"}}], found)
    assert found == {"replica"}
    # The collection's real graph has the edges its roles are known for.
    edges = graph()
    assert "system_packages" in edges["firewall"] and "maintenance" in edges["bench"], edges


def test_no_role_includes_a_role_that_includes_it_back():
    edges = graph()
    for role, targets in sorted(edges.items()):
        print("%s -> %s" % (role, ", ".join(sorted(targets)) or "-"))
    assert not cycles(edges), "roles that include each other: %s" % cycles(edges)


def test_a_cycle_is_found():
    # The last cycle the collection had (gone since the server's backups are listed by the plays): three roles.
    edges = {"gpustack_server": {"server_backup"}, "server_backup": {"gpustack_server", "maintenance"},
             "maintenance": {"gpustack_server"}, "bench": {"maintenance"}}
    assert cycles(edges) == [{"gpustack_server", "server_backup", "maintenance"}]


def test_the_rebuild_measures_again_from_its_playbook_not_from_the_maintenance_role():
    # The maintenance role included the bench role and the bench role the maintenance role's drain.
    assert "bench" not in graph()["maintenance"]
    plays = yaml.safe_load((REPO / "playbooks" / "rebuild_node.yml").read_text(encoding="utf-8"))
    tasks = plays[0]["tasks"]
    names = [(t.get("ansible.builtin.include_role") or {}).get("name") for t in tasks]
    assert names.index("pairserve.llm.rebuild") < names.index("pairserve.llm.bench"), names


def _role_tasks(playbook: str, hosts: str) -> list:
    plays = yaml.safe_load((REPO / "playbooks" / playbook).read_text(encoding="utf-8"))
    tasks = next(p["tasks"] for p in plays if p.get("hosts") == hosts and "tasks" in p
                 and any("server" in str(t) for t in p["tasks"]))
    return [(t.get("ansible.builtin.import_role") or t.get("ansible.builtin.include_role") or {}).get("name")
            for t in tasks]


def test_the_plays_that_install_or_upgrade_the_server_list_its_backups_after_it():
    # The gpustack_server role imported server_backup (the schedule) while server_backup's restore converges the
    # server with gpustack_server: now the plays name both, in order, and the upgrade refreshes the backups'
    # configuration, which names the GPUStack version of the dumps.
    assert "server_backup" not in graph()["gpustack_server"]
    names = _role_tasks("control_plane.yml", "gpustack_server")
    assert names.index("pairserve.llm.gpustack_server") < names.index("pairserve.llm.server_backup"), names
    names = _role_tasks("upgrade.yml", "gpustack_server")
    assert names.index("pairserve.llm.upgrade") < names.index("pairserve.llm.server_backup"), names


def test_the_flows_are_roles_that_the_playbooks_list_and_maintenance_includes_no_product_role():
    # The maintenance role was a hub: its upgrade and rebuild flows included nine other roles. They are roles of
    # their own now, listed by upgrade.yml and rebuild_node.yml, built on maintenance's steps; what maintenance still
    # includes serves its own flows (maintenance.yml's identity check and verify, serve.yml's drained restart).
    edges = graph()
    assert {"maintenance"} <= edges["upgrade"] and {"maintenance"} <= edges["rebuild"], edges
    assert not edges["maintenance"] & {"gpustack_server", "runner_image", "preflight", "bench", "upgrade",
                                       "rebuild"}, edges["maintenance"]
    plays = {p["name"]: p for p in yaml.safe_load((REPO / "playbooks" / "upgrade.yml").read_text(encoding="utf-8"))}
    calls = [(t.get("ansible.builtin.include_role") or {}) for play in plays.values() for t in play["tasks"]]
    assert [(c.get("name"), c.get("tasks_from")) for c in calls if c.get("name") == "pairserve.llm.upgrade"] == [
        ("pairserve.llm.upgrade", "server"), ("pairserve.llm.upgrade", "node")]
