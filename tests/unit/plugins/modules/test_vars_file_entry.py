"""pairserve.llm.vars_file_entry through real Ansible (one ansible-playbook run, each task's raw result by name):
the key's block replaced and every other byte kept, appended, created, unchanged, check mode and diff, mode kept,
a symlink kept, and the refusals (a key given twice, an anchor in the key's block, a flow mapping, a directory).
The text rules themselves (module_utils/vars_file.py) are also driven in-process."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from ansible_collections.pairserve.llm.plugins.module_utils import vars_file
from support.ansible_runner import run_playbook

WEIGHTS = {"node-a": 61, "node-b": 39}
FILE = """---
# Route weights, measured by the bench (docs/verify-and-bench.md).
pairserve_serving_mode: pooled   # one route
pairserve_route_weights:
  node-a: 58     # the seed's concurrency-8 split
  # node-b keeps the rest
  node-b: 42

# the rest stays as it is
pairserve_route_name: qwen
secret: !vault |
  $ANSIBLE_VAULT;1.1;AES256
  61626364
other:
  - {a: 1}
"""
REPLACED = FILE.replace("""pairserve_route_weights:
  node-a: 58     # the seed's concurrency-8 split
  # node-b keeps the rest
  node-b: 42
""", """pairserve_route_weights:
  node-a: 61
  node-b: 39
""")


def _files(tmp: Path) -> dict:
    paths = {}
    for name, text in [("replace", FILE), ("unchanged", REPLACED), ("check", FILE), ("append", "---\na: 1"),
                       ("twice", "pairserve_route_weights: {}\nb: 1\npairserve_route_weights: {}\n"),
                       ("anchor", "pairserve_route_weights: &w\n  node-a: 1\nb: *w\n"),
                       ("flow", "{pairserve_route_weights: {node-a: 1},\n b: 2}\n"),
                       ("private", FILE), ("target", FILE)]:
        paths[name] = tmp / (name + ".yml")
        paths[name].write_text(text)
    paths["private"].chmod(0o600)
    paths["link"] = tmp / "link.yml"
    paths["link"].symlink_to("target.yml")
    paths["new"] = tmp / "new.yml"
    paths["dir"] = tmp / "a-dir.yml"
    paths["dir"].mkdir()
    return paths


CASES = ["replace", "unchanged", "check", "append", "new", "twice", "anchor", "flow", "private", "link", "dir"]


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vars")
    paths = _files(tmp)
    tasks = []
    for name in CASES:
        args = {"path": str(paths[name]), "key": "pairserve_route_weights", "value": WEIGHTS}
        task = {"name": name, "pairserve.llm.vars_file_entry": args, "ignore_errors": True, "diff": True}
        if name == "check":
            task["check_mode"] = True
        tasks.append(task)
    tasks.append({"name": "replace again", "pairserve.llm.vars_file_entry": {
        "path": str(paths["replace"]), "key": "pairserve_route_weights", "value": WEIGHTS}})
    tasks.append({"name": "no create", "ignore_errors": True, "pairserve.llm.vars_file_entry": {
        "path": str(tmp / "absent.yml"), "key": "k", "value": 1, "create": False}})
    book = tmp / "play.yml"
    book.write_text(yaml.safe_dump([{"name": "vars_file_entry", "hosts": "localhost", "gather_facts": False,
                                     "connection": "local", "tasks": tasks}], sort_keys=False))
    result = run_playbook(book, inventory="localhost,", diff=True, timeout=300)
    by_name = {r["_task"]: r for r in result.results}
    assert set(CASES) <= set(by_name), result.stdout[-3000:]
    return by_name, paths


def test_the_key_block_is_replaced_and_every_other_byte_kept(played):
    by_name, paths = played
    res = by_name["replace"]
    assert res["changed"] is True and res["action"] == "replaced", res
    assert res["previous"] == {"node-a": 58, "node-b": 42} and res["previous_present"] is True
    assert paths["replace"].read_text() == REPLACED
    assert res["diff"]["before"] == FILE and res["diff"]["after"] == REPLACED
    assert by_name["replace again"]["changed"] is False and by_name["replace again"]["action"] == "unchanged"
    assert not [p for p in os.listdir(paths["replace"].parent) if p.endswith(".tmp")], "no temp file left"


def test_the_value_already_there_changes_nothing(played):
    by_name, paths = played
    assert by_name["unchanged"]["changed"] is False and "diff" not in by_name["unchanged"]
    assert paths["unchanged"].read_text() == REPLACED


def test_check_mode_reports_the_diff_and_writes_nothing(played):
    by_name, paths = played
    res = by_name["check"]
    assert res["changed"] is True and res["diff"]["after"] == REPLACED
    assert paths["check"].read_text() == FILE


def test_an_absent_key_is_appended_and_an_absent_file_created(played):
    by_name, paths = played
    assert by_name["append"]["action"] == "appended"
    assert paths["append"].read_text() == "---\na: 1\npairserve_route_weights:\n  node-a: 61\n  node-b: 39\n"
    assert by_name["new"]["action"] == "created" and by_name["new"]["changed"] is True
    assert yaml.safe_load(paths["new"].read_text()) == {"pairserve_route_weights": WEIGHTS}
    assert by_name["no create"]["_status"] == "failed" and "does not exist (create is false)" in by_name["no create"]["msg"]


def test_mode_and_symlink_are_kept(played):
    by_name, paths = played
    assert by_name["private"]["changed"] is True
    assert stat.S_IMODE(paths["private"].stat().st_mode) == 0o600
    assert paths["link"].is_symlink() and os.readlink(paths["link"]) == "target.yml"
    assert by_name["link"]["path"] == str(paths["target"].resolve())
    assert paths["target"].read_text() == REPLACED


@pytest.mark.parametrize("name,needle", [
    ("twice", "key pairserve_route_weights is given 2 times (lines 1, 3)"),
    ("anchor", "defines the anchor(s) &w"),
    ("flow", "its top level is a flow mapping"),
    ("dir", "is a directory"),
])
def test_what_cannot_be_replaced_safely_is_refused_and_left_alone(played, name, needle):
    by_name, paths = played
    res = by_name[name]
    assert res["_status"] == "failed" and needle in res["msg"], res
    if name != "dir":
        assert "The file was left unchanged" in res["msg"]


def test_the_file_is_unchanged_after_a_refusal(played):
    paths = played[1]
    assert paths["twice"].read_text() == "pairserve_route_weights: {}\nb: 1\npairserve_route_weights: {}\n"


# --- the text rules in-process --------------------------------------------------------------------------

@pytest.mark.parametrize("text,key,value,expected", [
    ("a: 1\nb: 2\n", "a", 3, "a: 3\nb: 2\n"),
    # a literal block's trailing blank line belongs to the scalar (YAML's clip chomping reads past it)
    ("a: |\n  line\n  # not a comment\n\nb: 2\n", "a", "x", "a: x\nb: 2\n"),
    ("a:\n- 1\n- 2\n# about b\nb: 2\n", "a", [3], "a:\n- 3\n# about b\nb: 2\n"),
    ("a: [1,\n  2]\nb: 2\n", "a", {"k": "v"}, "a:\n  k: v\nb: 2\n"),
    ("x: 1\n", "a", True, "x: 1\na: true\n"),
    ("", "a", 1, "---\na: 1\n"),
    ("# only a comment", "a", 1, "# only a comment\na: 1\n"),
])
def test_set_key_rules(text, key, value, expected):
    new = vars_file.set_key(text, key, value)[0]
    assert new == expected
    assert yaml.safe_load(new)[key] == value


def test_a_same_looking_value_of_another_type_is_a_change():
    assert vars_file.set_key("a: 1\n", "a", True)[1] == "replaced"
    assert vars_file.set_key("a: 1\n", "a", 1.0)[1] == "replaced"
    assert vars_file.set_key("a: {x: 1}\n", "a", {"x": 1})[1] == "unchanged"


@pytest.mark.parametrize("text,needle", [
    ("$ANSIBLE_VAULT;1.1;AES256\n6162\n", "vault-encrypted as a whole"),
    ("a: 1\n---\nb: 2\n", "not valid YAML"),
    ("- 1\n", "not a mapping"),
    ("a: [1\n", "not valid YAML"),
    ("base: &b {a: 1}\n<<: *b\n", "comes from a merge"),
])
def test_set_key_refusals(text, needle):
    with pytest.raises(vars_file.VarsFileError, match=r".*" + needle):
        vars_file.set_key(text, "a", 2)


def test_verify_catches_an_edit_that_changes_another_key():
    before = vars_file.load("a: 1\nb: 2\n")
    with pytest.raises(vars_file.VarsFileError, match="would change other keys too"):
        vars_file.verify(before, "a: 3\nb: 4\n", "a", 3)
    with pytest.raises(vars_file.VarsFileError, match="would read a as"):
        vars_file.verify(before, "a: 4\nb: 2\n", "a", 3)
    assert json.dumps(vars_file.render_entry("a", {"z": 1, "b": 2})) == json.dumps("a:\n  z: 1\n  b: 2\n")
