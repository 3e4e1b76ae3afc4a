"""plugins/module_utils/tokenizer.py, the tokenizer truncation fix: the text surgery (only the truncation members
change, and nothing else, byte for byte) and the file helpers the tokenizer_patch module uses (the directory entry
swapped, never the blob it points at; the backup directory; the record; the debris of a killed run)."""

from __future__ import annotations

import difflib
import json
import os

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import tokenizer as tok
from support import checkpoint_repo


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


def test_top_level_members_spans_skip_nested_keys():
    text = ' {"a": {"truncation": 1}, "truncation" : [1, 2] , "b": "x"}'
    parsed = tok.top_level_members(text)
    assert [m["key"] for m in parsed["members"]] == ["a", "truncation", "b"]
    member = parsed["members"][1]
    assert text[member["value_start"]:member["value_end"]] == "[1, 2]"
    assert text[member["sep"]] == "," and parsed["open"] == 2 and text[parsed["close"]] == "}"


# -- the file helpers -----------------------------------------------------------------------------------------------

def test_entry_kind_tells_file_symlink_absent_and_other(tmp_path):
    (tmp_path / "blob").write_text("{}")
    (tmp_path / "link").symlink_to("blob")
    (tmp_path / "dangling").symlink_to("gone")
    (tmp_path / "dir").mkdir()
    kinds = {name: tok.entry_kind(str(tmp_path / name)) for name in ("blob", "link", "dangling", "dir", "nothing")}
    assert kinds == {"blob": "file", "link": "symlink", "dangling": "symlink", "dir": "other", "nothing": "absent"}


def test_replace_entry_swaps_the_link_and_leaves_the_blob_pristine(tmp_path):
    blob = tmp_path / "blobs" / "abc"
    blob.parent.mkdir()
    blob.write_text('{"truncation": {"max_length": 2048}}')
    entry = tmp_path / "tokenizer.json"
    entry.symlink_to(os.path.join("blobs", "abc"))
    tok.replace_entry(str(entry), b'{"truncation": null}')
    assert tok.entry_kind(str(entry)) == "file" and entry.read_text() == '{"truncation": null}'
    assert oct(entry.stat().st_mode & 0o777) == oct(0o644)
    assert blob.read_text() == '{"truncation": {"max_length": 2048}}'
    tok.restore_link(str(entry), os.path.join("blobs", "abc"))
    assert os.readlink(entry) == os.path.join("blobs", "abc") and entry.read_text() == blob.read_text()
    assert sorted(os.listdir(tmp_path)) == ["blobs", "tokenizer.json"]  # no temp entry left behind


def test_default_backup_dir_is_beside_a_snapshot_and_inside_any_other_directory(tmp_path):
    snapshot = tmp_path / "models--org--m" / "snapshots" / "0123abcd"
    assert tok.default_backup_dir(str(snapshot)) == str(
        tmp_path / "models--org--m" / "pairserve" / "tokenizer-patch" / "0123abcd")
    export = tmp_path / "export" / "qwen"
    assert tok.default_backup_dir(str(export) + "/") == str(export / ".pairserve-tokenizer-patch")


def test_the_record_round_trips_and_a_missing_or_broken_one_reads_empty(tmp_path):
    backup = tmp_path / "backup"
    assert tok.read_record(str(backup)) == {}
    tok.write_record(str(backup), {"tokenizer.json": {"link": "../../blobs/abc"}})
    assert json.loads((backup / "record.json").read_text()) == {"tokenizer.json": {"link": "../../blobs/abc"}}
    assert tok.read_record(str(backup)) == {"tokenizer.json": {"link": "../../blobs/abc"}}
    for broken in ("[1, 2]", "{not json"):
        (backup / "record.json").write_text(broken)
        assert tok.read_record(str(backup)) == {}


def test_sweep_debris_removes_only_this_modules_temp_names(tmp_path):
    snapshot, backup = tmp_path / "snap", tmp_path / "backup"
    snapshot.mkdir()
    backup.mkdir()
    ours = [snapshot / ".tokenizer.json.pairserve-a1b2c3d4.tmp", snapshot / ".tokenizer_config.json.pairserve-restore",
            backup / ".record.json.pairserve-x9y8z7w6.tmp", backup / ".tokenizer.json.orig.pairserve-q1w2e3r4.tmp"]
    others = [snapshot / ".config.json.pairserve-a1b2c3d4.tmp", snapshot / "tokenizer.json", backup / "record.json"]
    for path in ours + others:
        path.write_text("x")
    expected = sorted(str(p) for p in ours)
    assert sorted(tok.sweep_debris(str(snapshot), str(backup), check_mode=True)) == expected
    assert all(p.exists() for p in ours)  # check mode only names them
    assert sorted(tok.sweep_debris(str(snapshot), str(backup), check_mode=False)) == expected
    assert [p for p in ours if p.exists()] == [] and all(p.exists() for p in others)
