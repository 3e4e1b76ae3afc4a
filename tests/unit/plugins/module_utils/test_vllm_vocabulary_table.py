"""plugins/module_utils/vllm_vocabulary_table.py, the generated VOCABULARY: the shape and invariants its reader
(module_utils/vllm_vocabulary.py) relies on, for every release in it.

- versions are dotted whole numbers (versions() sorts them as int tuples);
- each entry is exactly {"flags", "choices"}, both non-empty lists (choices() copies the list, dest_of() scans flags);
- choices are unique strings in sorted order (refusal() compares str(value); a None choice is the text "None");
- flags are option strings with no "=" and one dest each per release (extra_args_refusals() splits --flag=value on the
  first "=", and dest_of() returns the first dest whose flags hold the flag); the long flag is the dest's name;
- no choice starts with "-" (extra_args_refusals() reads `--flag value` only when value does not).

Which values each release holds, and that the file is the generator's output, are tested in test_vllm_vocabulary.py.
"""

from __future__ import annotations

import re

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils.vllm_vocabulary_table import VOCABULARY

RELEASES = sorted(VOCABULARY)


def test_the_table_is_a_dict_of_dotted_whole_number_versions():
    assert isinstance(VOCABULARY, dict) and VOCABULARY
    for version in VOCABULARY:
        assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version), version


@pytest.mark.parametrize("version", RELEASES)
def test_every_entry_has_exactly_non_empty_flags_and_choices(version):
    for dest, entry in VOCABULARY[version].items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", dest), (version, dest)
        assert sorted(entry) == ["choices", "flags"], (version, dest)
        assert isinstance(entry["flags"], list) and entry["flags"], (version, dest)
        assert isinstance(entry["choices"], list) and entry["choices"], (version, dest)


@pytest.mark.parametrize("version", RELEASES)
def test_choices_are_unique_sorted_strings_none_spelled_as_text(version):
    for dest, entry in VOCABULARY[version].items():
        choices = entry["choices"]
        assert all(isinstance(c, str) and c for c in choices), (version, dest)
        assert choices == sorted(set(choices)), (version, dest)
        assert not [c for c in choices if c.startswith("-")], (version, dest)
    assert "None" in VOCABULARY[version]["collect_detailed_traces"]["choices"]


@pytest.mark.parametrize("version", RELEASES)
def test_flags_are_option_strings_each_naming_one_dest(version):
    owner = {}
    for dest, entry in VOCABULARY[version].items():
        assert "--" + dest.replace("_", "-") in entry["flags"], (version, dest)
        for flag in entry["flags"]:
            assert re.fullmatch(r"--?[a-z0-9][a-z0-9-]*", flag), (version, dest, flag)
            assert owner.setdefault(flag, dest) == dest, (version, flag, owner[flag], dest)
        assert entry["flags"] == sorted(entry["flags"]), (version, dest)


def test_numbers_are_kept_as_the_text_a_command_line_spells():
    # --max-lora-rank takes ints; the table holds their text, so refusal() can compare str(value)
    for version in RELEASES:
        ranks = VOCABULARY[version]["max_lora_rank"]["choices"]
        assert "16" in ranks and all(rank.isdigit() for rank in ranks), version
