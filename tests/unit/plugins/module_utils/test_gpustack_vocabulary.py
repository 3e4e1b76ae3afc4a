"""GPUStack's fixed vocabularies and its password rule, from the generated table (scripts/gpustack_vocabulary.py reads
them from the release's sources; tests/integration/gpustack/test_gpustack_vocabulary_live.py compares the table with the
sources of the venv the integration tier builds), refused by the validation play's rules with host and variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.filter.gpustack_vocabulary import gpustack_password_problems
from ansible_collections.pairserve.llm.plugins.module_utils import gpustack_vocabulary as gv
from ansible_collections.pairserve.llm.plugins.module_utils.gpustack_vocabulary_table import VOCABULARY
from ansible_collections.pairserve.llm.plugins.module_utils.inventory_check import problems
from lab import pins
from support import inventory_views
from support.scripts import load

REPO = Path(__file__).resolve().parents[4]
generator = load(REPO / "scripts" / "gpustack_vocabulary.py", "gpustack_vocabulary_generator")


def test_the_pinned_gpustack_has_a_vocabulary():
    assert pins.GPUSTACK in VOCABULARY
    table = VOCABULARY[pins.GPUSTACK]
    assert table["runtime_env_choices"]["GPUSTACK_RUNTIME_DOCKER_RESOURCE_INJECTION_POLICY"]["options"] == ["Env", "CDI"]
    assert len(table["password_rules"]) == 4


def test_the_committed_table_is_what_the_generator_writes():
    text = (REPO / "plugins" / "module_utils" / "gpustack_vocabulary_table.py").read_text()
    sources = dict(line.strip().split(": ", 1) for line in text.split('"""')[1].splitlines()
                   if line.startswith("  ") and ": " in line)
    assert generator.render_table(VOCABULARY, sources) == text


def test_the_generator_reads_rules_from_source(tmp_path):
    """The AST reading on a release-shaped tree: a rule added upstream shows up, a rule removed disappears."""
    (tmp_path / "gpustack" / "schemas").mkdir(parents=True)
    (tmp_path / "gpustack_runtime").mkdir()
    (tmp_path / "gpustack" / "__init__.py").write_text("__version__ = 'v9.9.9'\n")
    (tmp_path / "gpustack" / "schemas" / "users.py").write_text(
        "import re\n\ndef _validate_password(value):\n"
        "    if not re.search(r'[0-9]', value):\n        raise ValueError('needs a digit')\n"
        "    if not re.search(r'.{12,}', value):\n        raise ValueError('needs 12 characters')\n    return value\n")
    (tmp_path / "gpustack" / "schemas" / "model_routes.py").write_text("import re\nname_pattern = r'^[a-z]+$'\n")
    (tmp_path / "gpustack_runtime" / "envs.py").write_text(
        "variables = {\n    'X': lambda: choice(getenv('GPUSTACK_RUNTIME_X'), options=['A', 'B'], default='A'),\n"
        "    'Y': lambda: getenv('GPUSTACK_RUNTIME_Y'),\n}\n")
    version, table = generator.read(tmp_path)
    assert version == "9.9.9"
    assert table == {"runtime_env_choices": {"GPUSTACK_RUNTIME_X": {"options": ["A", "B"], "default": "A"}},
                     "password_rules": [["[0-9]", "needs a digit"], [".{12,}", "needs 12 characters"]],
                     "route_name_pattern": "^[a-z]+$"}


@pytest.mark.parametrize("password,broken", [
    ("Abcdef1!", []),
    ("lab-only-admin_Xq7vR2", []),
    ("abcdefg1!", ["uppercase"]),
    ("ABCDEFG1!", ["lowercase"]),
    ("Abcdefgh!", ["digit"]),
    ("Abcdefgh1", ["special character"]),
    ("Ab1-xyzw", ["special character"]),  # a dash is not one of GPUStack's special characters
    ("Ab1!", ["shorter than 8"]),
])
def test_the_password_rule_is_gpustacks(password, broken):
    found = gv.password_problems("2.2.3", password)
    assert bool(found) == bool(broken)
    for word in broken:
        assert word in " ".join(found)
    if found:
        assert password not in " ".join(found)


def test_the_filter_names_host_and_variable_and_never_the_password():
    found = gpustack_password_problems("lab-only-admin-Xq7vR2", "2.2.3", "node-a")
    assert [(p["host"], p["variable"]) for p in found] == [("node-a", "pairserve_gpustack_admin_password")]
    assert "!@#$%^&*_+" in found[0]["problem"] and "Xq7vR2" not in repr(found)
    # a release the table does not cover: only the collection's own floor
    assert gpustack_password_problems("Abcdefgh", "9.9.9", "node-a") == []


@pytest.mark.parametrize("env,ok", [
    ({"GPUSTACK_RUNTIME_DOCKER_RESOURCE_INJECTION_POLICY": "CDI"}, True),
    ({"GPUSTACK_RUNTIME_DOCKER_RESOURCE_INJECTION_POLICY": "cdi"}, False),
    ({"GPUSTACK_RUNTIME_DEPLOY_IMAGE_PULL_POLICY": "Missing"}, False),
    ({"GPUSTACK_RUNTIME_DEPLOY_IMAGE_PULL_POLICY": "Never", "HTTP_PROXY": "http://proxy:3128"}, True),
])
def test_a_runtime_setting_outside_its_options_is_refused(env, ok):
    found = list(problems(inventory_views.views(node_b={"pairserve_gpustack_worker_env": env}),
                          inventory_views.GROUPS, inventory_views.CONSTRAINTS))
    assert [(p["host"], p["variable"]) for p in found] == ([] if ok else [("node-b", "pairserve_gpustack_worker_env")])
    if not ok:
        name, value = next(iter(env.items()))
        options = VOCABULARY[pins.GPUSTACK]["runtime_env_choices"][name]
        assert "%s %r is not one of GPUStack" % (name, value) in found[0]["problem"]
        assert ", ".join(options["options"]) in found[0]["problem"]
        assert "silently use %s" % options["default"] in found[0]["problem"]


@pytest.mark.parametrize("changes,variable", [
    ({"pairserve_route_name": "qwen"}, None),
    ({"pairserve_route_name": "1qwen"}, "pairserve_route_name"),  # the collection's own name rule lets it through
    ({"pairserve_serving_mode": "split", "pairserve_split_routes": {"text": "2-agents"}}, "pairserve_split_routes"),
    ({"pairserve_serving_mode": "split", "pairserve_split_routes": {"text": "agents"}}, None),
])
def test_route_names_follow_gpustacks_own_pattern(changes, variable):
    node_b = {"pairserve_replica_profile": "text"} if changes.get("pairserve_serving_mode") == "split" else {}
    server = dict(changes)
    if changes.get("pairserve_serving_mode") == "split":
        node_b["pairserve_serving_mode"] = "split"
        server["pairserve_verify_routes"] = None
    found = problems(inventory_views.views(node_a=server, node_b=node_b), inventory_views.GROUPS,
                     inventory_views.CONSTRAINTS)
    assert [(p["host"], p["variable"]) for p in found] == ([("node-a", variable)] if variable else []), found
    if variable:
        assert "does not match GPUStack 2.2.3's route name pattern" in found[0]["problem"]


def test_the_rule_is_the_pinned_releases():
    """2.3.0 dropped the special character from its rule (read from its sources): the same password is judged by the
    release the inventory pins."""
    assert gv.password_problems("2.3.0", "Abcdefg1") == []
    assert "special character" in " ".join(gv.password_problems("2.2.3", "Abcdefg1"))
