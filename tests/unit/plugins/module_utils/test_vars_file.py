"""plugins/module_utils/vars_file.py's text rules beyond the module's cases: Ansible's tags read as opaque values, the
strict equality that decides "unchanged", quoted and indented keys, the merge key, document markers, anchors outside
the key's block, what set_key returns, and verify's refusal of text that does not parse.

The vars_file_entry module through Ansible (replace, append, create, check mode, refusals) and the basic text rules
are in tests/unit/plugins/modules/test_vars_file_entry.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import vars_file

VAULTED = "secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\nname: !unsafe '{{ x }}'\n"


def test_ansible_tags_are_read_as_opaque_values_compared_by_tag_and_text():
    data = vars_file.load(VAULTED)
    assert data == {"secret": vars_file.Tagged("!vault", "$ANSIBLE_VAULT;1.1;AES256\n6162\n"),
                    "name": vars_file.Tagged("!unsafe", "{{ x }}")}
    assert data["name"] != vars_file.Tagged("!vault", "{{ x }}") and data["name"] != "{{ x }}"
    assert hash(data["name"]) == hash(vars_file.Tagged("!unsafe", "{{ x }}"))
    assert repr(data["name"]) == "!unsafe '{{ x }}'"


@pytest.mark.parametrize("a, b, equal", [
    (1, 1, True), ([1, 2], (1, 2), True), (None, None, True), ({"x": [1, {"y": "z"}]}, {"x": [1, {"y": "z"}]}, True),
    (True, 1, False), (0, False, False), (1, 1.0, False), ("1", 1, False), (None, "", False),
    ({"x": 1, "y": 2}, {"y": 2, "x": 1}, False),  # the key order is part of the value written
    ([1, 2], [1, 2, 3], False), ({"x": [1, True]}, {"x": [1, 1]}, False),
])
def test_same_is_equal_values_of_equal_types(a, b, equal):
    # both ways round: the rule is symmetric
    assert vars_file.same(a, b) is equal
    assert vars_file.same(*reversed((a, b))) is equal


def test_set_key_returns_new_text_action_previous_value_and_presence():
    assert vars_file.set_key("a: 1\n", "a", 2) == ("a: 2\n", "replaced", 1, True)
    assert vars_file.set_key("a: 1\n", "b", [1]) == ("a: 1\nb:\n- 1\n", "appended", None, False)
    assert vars_file.set_key("a: 1\n", "a", 1) == ("a: 1\n", "unchanged", 1, True)
    # a reordered mapping is a change: the file gets the keys in the order given
    assert vars_file.set_key("a:\n  x: 1\n  y: 2\n", "a", {"y": 2, "x": 1})[:2] == ("a:\n  y: 2\n  x: 1\n", "replaced")


def test_a_tagged_value_already_there_is_unchanged_and_the_other_tagged_keys_survive_an_edit():
    same = vars_file.set_key(VAULTED, "name", vars_file.Tagged("!unsafe", "{{ x }}"))
    assert same == (VAULTED, "unchanged", vars_file.Tagged("!unsafe", "{{ x }}"), True)
    new, action = vars_file.set_key(VAULTED, "name", "plain")[:2]
    assert action == "replaced" and new == "secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\nname: plain\n"


@pytest.mark.parametrize("text, expected", [
    ("'a': 1\nb: 2\n", "a: 9\nb: 2\n"),                         # a quoted key is still the key
    ('"a": 1 # old\n', "a: 9\n"),
    ("---\na: 1\n...\n", "---\na: 9\n...\n"),                   # document markers stay
    ("base: &b 1\na: *b\n", "base: &b 1\na: 9\n"),              # an alias in the block is no anchor of it
    ("a: 1\nb: 2", "a: 9\nb: 2"),                               # no newline at the end: none is added
])
def test_replaced_blocks(text, expected):
    assert vars_file.set_key(text, "a", 9)[:2] == (expected, "replaced")


def test_a_flow_mapping_holding_the_value_already_is_left_alone():
    assert vars_file.set_key("{a: 1, b: 2}\n", "a", 1)[1] == "unchanged"


@pytest.mark.parametrize("text, key, message", [
    ("  a: 1\n  b: 2\n", "a", "key a is not a plain key at the start of its line (line 1)"),
    ("a: 1\n", "<<", "<< is YAML's merge key, not a variable"),
    ("just text\n", "a", "its top level is a str, not a mapping of variables"),
    ("a: &x [1]\nb: *x\n", "a", "key a defines the anchor(s) &x (lines 1-1), which other keys may use"),
])
def test_set_key_refusals_name_the_reason(text, key, message):
    with pytest.raises(vars_file.VarsFileError) as info:
        vars_file.set_key(text, key, 2)
    assert str(info.value).startswith(message)


def test_verify_refuses_text_that_does_not_parse():
    with pytest.raises(vars_file.VarsFileError) as info:
        vars_file.verify({}, "a: [1\n", "a", [1])
    assert str(info.value).startswith("the edited file would not parse (it is not valid YAML (")
    assert str(info.value).endswith("; nothing was written")
    vars_file.verify({"b": 2}, "b: 2\na: [1]\n", "a", [1])  # the same other keys and the new value: accepted
