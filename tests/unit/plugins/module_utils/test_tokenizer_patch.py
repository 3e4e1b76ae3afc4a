"""The tokenizer truncation surgery: only the truncation members change, and nothing else, byte for byte."""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

import pytest

# The collection resolves as ansible_collections.pairserve.llm through the link `make deps` creates.
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / ".cache" / "collections"))

from ansible_collections.pairserve.llm.plugins.module_utils import tokenizer as tok  # noqa: E402
from lab import checkpoint_repo  # noqa: E402


def changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_tokenizer_json_truncation_becomes_null_and_nothing_else_changes():
    before = checkpoint_repo.tokenizer_json()
    after, edits, diff = tok.patch_text("tokenizer.json", before)
    assert json.loads(after)["truncation"] is None
    original = json.loads(before)
    patched = json.loads(after)
    original["truncation"] = None
    assert patched == original
    # the vocabulary token spelled "truncation" and the merge made of it are untouched
    assert patched["model"]["vocab"]["truncation"] == 2
    assert ["t", "runcation"] in patched["model"]["merges"]
    lines = changed_lines(before, after)
    assert lines[0] == '-  "truncation": {' and '+  "truncation": null,' in lines
    assert all("truncation" in l or "max_length" in l or "direction" in l or "strategy" in l or "stride" in l
               or l.strip() in ("-  },",) for l in lines), lines
    assert edits[0]["before"]["max_length"] == 2048
    assert "max_length" in diff["before"] and "max_length" not in diff["after"]


def test_tokenizer_json_already_null_is_left_alone():
    text = checkpoint_repo.tokenizer_json()
    once = tok.patch_text("tokenizer.json", text)[0]
    assert tok.patch_text("tokenizer.json", once) == (None, [], None)


def test_tokenizer_config_keys_removed_formatting_kept():
    before = checkpoint_repo.tokenizer_config_json()
    after, edits, _diff = tok.patch_text("tokenizer_config.json", before)
    parsed = json.loads(after)
    for key in tok.CONFIG_KEYS:
        assert key not in parsed
    assert parsed["model_max_length"] == 262144
    assert parsed["chat_template"] == json.loads(before)["chat_template"]
    removed = list(changed_lines(before, after))
    assert all(l.startswith("-") for l in removed), removed  # lines only go away, none is rewritten
    assert len(removed) == 5
    assert edits[0]["removed"] == {"max_length": 2048, "stride": 0, "truncation": True,
                                   "truncation_side": "right", "truncation_strategy": "longest_first"}


@pytest.mark.parametrize("doc,expected", [
    ('{"a": 1, "max_length": 5}', '{"a": 1}'),
    ('{"max_length": 5, "a": 1}', '{"a": 1}'),
    ('{"max_length": 5}', '{}'),
    ('{"a": 1, "stride": 0, "truncation": true}', '{"a": 1}'),
    ('{"stride": 0, "a": [1, {"max_length": 3}], "truncation": "longest_first", "b": 2}',
     '{"a": [1, {"max_length": 3}], "b": 2}'),
    ('{\n  "a": "x\\"max_length\\"",\n  "max_length": 1\n}\n', '{\n  "a": "x\\"max_length\\""\n}\n'),
])
def test_tokenizer_config_compact_and_nested_forms(doc, expected):
    after = tok.patch_text("tokenizer_config.json", doc)[0]
    assert after.replace(" ", "") == expected.replace(" ", "") or after == expected
    assert json.loads(after) == json.loads(expected)


def test_truncation_false_is_harmless_and_kept():
    assert tok.patch_text("tokenizer_config.json", '{"truncation": false, "a": 1}')[0] is None


def test_nested_truncation_only_is_not_touched():
    doc = '{"model": {"vocab": {"truncation": 7}}, "truncation": null}'
    assert tok.patch_text("tokenizer.json", doc)[0] is None


def test_broken_json_is_refused():
    with pytest.raises(tok.PatchError):
        tok.patch_text("tokenizer.json", '{"truncation": {"max_length": 2048}')
    with pytest.raises(tok.PatchError):
        tok.patch_text("tokenizer.json", '["truncation"]')


def test_excerpt_has_three_lines_of_context():
    text = "".join("line%d\n" % i for i in range(20))
    start = text.index("line10")
    part, first = tok.excerpt(text, start, start + 6)
    assert first == 8 and part.splitlines() == ["line%d" % i for i in range(7, 14)]
