"""Tests of module_utils/gpustack_vocabulary_table.py, the table scripts/gpustack_vocabulary.py generates: the shape
gpustack_vocabulary.py reads (runtime_env_choices, password_rules, route_name_pattern per exact GPUStack version), a
version for every GPUStack release the collection installs (its constraints files), defaults among their options,
rules whose patterns compile, and the special-character rule as the password message quotes it. That the committed
table is what the generator writes, and the rules' use, are tested in test_gpustack_vocabulary.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import gpustack_vocabulary, inventory_check
from ansible_collections.pairserve.llm.plugins.module_utils.gpustack_vocabulary_table import VOCABULARY

REPO = Path(__file__).resolve().parents[4]
INSTALL_FILES = REPO / "roles" / "gpustack_install" / "files"


def installable_versions() -> set:
    """The releases the validation play accepts: one constraints file each (playbooks/validate.yml reads the same)."""
    return {re.sub(r"^gpustack-(.*)\.constraints\.txt$", r"\1", p.name) for p in INSTALL_FILES.glob("gpustack-*.constraints.txt")}


def test_every_release_the_collection_installs_has_a_vocabulary_and_every_vocabulary_is_one():
    assert installable_versions() and set(VOCABULARY) == installable_versions()
    assert all(inventory_check.EXACT_VERSION.match(version) for version in VOCABULARY)


@pytest.mark.parametrize("version", sorted(VOCABULARY))
def test_each_release_has_the_three_rules_in_the_shapes_they_are_read_in(version):
    table = VOCABULARY[version]
    assert set(table) == {"runtime_env_choices", "password_rules", "route_name_pattern"}
    assert table["runtime_env_choices"] and table["password_rules"]
    # plain JSON values, as the generator writes them (a set or a tuple would change its diffs)
    assert json.loads(json.dumps(table)) == table


@pytest.mark.parametrize("version", sorted(VOCABULARY))
def test_each_runtime_setting_has_distinct_options_and_its_default_among_them(version):
    for name, entry in VOCABULARY[version]["runtime_env_choices"].items():
        assert name.startswith("GPUSTACK_RUNTIME_") and name == name.upper(), name
        assert set(entry) == {"options", "default"}, name
        options = entry["options"]
        assert options and all(isinstance(o, str) and o for o in options), name
        assert len(set(options)) == len(options), name
        # the runtime falls back to the default for a value outside the options: the default itself must pass
        assert entry["default"] in options, name
        assert gpustack_vocabulary.worker_env_problems(version, {name: entry["default"]}) == []


@pytest.mark.parametrize("version", sorted(VOCABULARY))
def test_each_password_rule_is_a_pattern_and_its_message(version):
    for rule in VOCABULARY[version]["password_rules"]:
        assert isinstance(rule, list) and len(rule) == 2, rule
        pattern, message = rule
        re.compile(pattern)
        assert message.startswith("Password must contain"), rule
    # every rule can be met at once: a password of the rules' own examples passes
    assert gpustack_vocabulary.password_problems(version, "Abcdefg1!") == []


def test_the_special_characters_a_message_names_are_the_ones_the_rule_accepts():
    specials = [p for p, m in VOCABULARY["2.2.3"]["password_rules"] if "special" in m]
    assert specials == ["[!@#$%^&*_+]"]
    for char in "!@#$%^&*_+":
        assert re.search(specials[0], char)
    assert not re.search(specials[0], "-")
    text = gpustack_vocabulary.password_problems("2.2.3", "Abcdefg1")[0]
    assert "(special characters: !@#$%^&*_+)" in text


@pytest.mark.parametrize("version", sorted(VOCABULARY))
@pytest.mark.parametrize("name,ok", [("qwen", True), ("qwen-text", True), ("q", True), ("qwen:v2.1", True),
                                     ("qwen-", False), ("-qwen", False), ("1qwen", False), ("qwen text", False), ("", False)])
def test_the_route_name_pattern_is_anchored_at_both_ends(version, name, ok):
    pattern = VOCABULARY[version]["route_name_pattern"]
    assert pattern.startswith("^") and pattern.endswith("$")
    assert bool(re.match(pattern, name)) is ok
