"""Which role includes which (include_role, import_role and meta dependencies, in every task file of every role),
and the cycles among them: a role that includes a role that includes it back hides the order of a day-2 play
inside the roles (issue 39). The day-2 playbooks list their roles in order instead; the test fails on any cycle
that is not in KNOWN, and on an entry of KNOWN that no longer is a cycle (the list only shrinks).

The graph is printed with -s: `pytest -s tests/unit/roles/test_role_includes.py`.
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PREFIX = "pairserve.llm."
INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role")

# Cycles left, each a set of roles (a strongly connected component of the graph), with why it is still there:
# - server_backup's restore converges the server with the gpustack_server role, whose main entry point imports
#   server_backup's schedule; that role's wait for the workers drains lost ones through the maintenance role, which
#   upgrades the server with gpustack_server. Breaking it means the restore and the drain steps listed by their
#   playbooks (restore.yml, upgrade.yml) and the drain steps as a small role of their own (issue 39, still open).
KNOWN = [{"gpustack_server", "maintenance", "server_backup"}]


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
    found = cycles(edges)
    new = [c for c in found if c not in KNOWN]
    assert not new, "roles that include each other: %s" % new
    gone = [c for c in KNOWN if c not in found]
    assert not gone, "no longer a cycle, remove it from KNOWN: %s" % gone


def test_the_rebuild_measures_again_from_its_playbook_not_from_the_maintenance_role():
    # The maintenance role included the bench role and the bench role the maintenance role's drain.
    assert "bench" not in graph()["maintenance"]
    plays = yaml.safe_load((REPO / "playbooks" / "rebuild_node.yml").read_text(encoding="utf-8"))
    tasks = plays[0]["tasks"]
    names = [(t.get("ansible.builtin.include_role") or {}).get("name") for t in tasks]
    assert names.index("pairserve.llm.maintenance") < names.index("pairserve.llm.bench"), names
