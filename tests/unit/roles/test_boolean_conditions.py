"""Every condition that reads a boolean setting casts it with `| bool`.

Users type booleans as `-e name=false`, `"no"` or `0`: those arrive as strings, which ansible-core 2.19 refuses
as a conditional (and a non-empty string would be true anyway). A setting is boolean when its role default is
`true`/`false` or its argument_specs type is `bool`. The conditions are every `when`, `that`, `failed_when`,
`changed_when` and `until` in the YAML under roles/ and playbooks/ (and site.yml).
"""

from __future__ import annotations

import re

import pytest
import yaml

from support.ansible_runner import REPO

CONDITION_KEYS = {"when", "that", "failed_when", "changed_when", "until"}


def boolean_settings() -> dict[str, str]:
    """name -> the file that makes it boolean."""
    found: dict[str, str] = {}
    for path in sorted(REPO.glob("roles/*/defaults/main.yml")):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            if isinstance(value, bool):
                found.setdefault(name, str(path.relative_to(REPO)))
    for path in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(path.read_text())["argument_specs"] or {}).values():
            # Top-level options only: the nested ones are keys of a dict, not variables.
            for name, option in (entry.get("options") or {}).items():
                if (option or {}).get("type") == "bool":
                    found.setdefault(name, str(path.relative_to(REPO)))
    return found


def conditions(node, out: list[str]) -> list[str]:
    """Every condition string anywhere in a parsed YAML document (tasks, blocks, handlers, plays)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONDITION_KEYS:
                out.extend(c for c in (value if isinstance(value, list) else [value]) if isinstance(c, str))
            conditions(value, out)
    elif isinstance(node, list):
        for item in node:
            conditions(item, out)
    return out


# After the name: any `| default(...)`, then `| bool`. Or an existence test, which reads no value.
CAST = re.compile(r"(\s*\|\s*default\([^()]*\))*\s*\|\s*bool\b")
EXISTENCE = re.compile(r"\s+is\s+(not\s+)?(defined|undefined)\b")


def bare_references(condition: str, names) -> list[str]:
    """The boolean settings `condition` reads without casting them."""
    bare = []
    for name in names:
        # Not an attribute (x.name) nor a quoted string ('name').
        for match in re.finditer(r"(?<![\w.'\"])%s(?!\w)" % re.escape(name), condition):
            rest = condition[match.end():]
            if not (CAST.match(rest) or EXISTENCE.match(rest)):
                bare.append(name)
    return bare


def yaml_files():
    files = [REPO / "site.yml"]
    files += sorted(REPO.glob("roles/**/*.yml")) + sorted(REPO.glob("playbooks/**/*.yml"))
    return files


def all_conditions() -> list[tuple[str, str]]:
    found = []
    for path in yaml_files():
        for doc in yaml.safe_load_all(path.read_text()):
            found += [(str(path.relative_to(REPO)), c) for c in conditions(doc, [])]
    return found


def test_every_condition_casts_the_boolean_settings_it_reads():
    names = boolean_settings()
    problems = [f"{path}: {name} in `{' '.join(cond.split())}`"
                for path, cond in all_conditions() for name in bare_references(cond, names)]
    assert not problems, "add `| bool` (a value typed on the command line is a string):\n" + "\n".join(problems)


def test_the_scan_sees_the_settings_and_the_conditions():
    # Guards against a scan that silently finds nothing (a moved file, a changed layout).
    names = boolean_settings()
    assert {"pairserve_checkpoint_patch_tokenizer", "pairserve_lab_mode", "pairserve_controller_enabled",
            "pairserve_preflight_require_time_sync", "pairserve_verify_wait_for_instances"} <= set(names)
    found = all_conditions()
    assert len(found) > 100
    assert any("pairserve_checkpoint_patch_tokenizer" in cond for dummy, cond in found)


@pytest.mark.parametrize("condition, bare", [
    ("pairserve_x", ["pairserve_x"]),
    ("not pairserve_x", ["pairserve_x"]),
    ("pairserve_x and other | bool", ["pairserve_x"]),
    ("pairserve_x is true", ["pairserve_x"]),
    ("pairserve_x | default(false)", ["pairserve_x"]),
    ("pairserve_x | bool", []),
    ("not (pairserve_x | default(false) | bool)", []),
    ("pairserve_x|bool and ansible_check_mode", []),
    ("pairserve_x is defined", []),
    ("pairserve_x is not defined or pairserve_x | bool", []),
    ("result.pairserve_x", []),
    ("pairserve_x_more and 'pairserve_x' in names", []),
])
def test_the_check_tells_a_cast_from_a_bare_reference(condition, bare):
    assert bare_references(condition, ["pairserve_x"]) == bare
