"""The controller service runs outside Ansible with a copy of some of the collection's module_utils
(roles/controller/vars/main.yml, pairserve_controller_module_utils): the list must hold every module_utils file
those files import, transitively, or the service dies at its first import on the node."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
MODULE_UTILS = REPO / "plugins" / "module_utils"
IMPORT = re.compile(r"^from ansible_collections\.pairserve\.llm\.plugins\.module_utils(?:\.(\w+))? import "
                    r"(\([^)]*\)|[^\n]*)", re.MULTILINE)


def imported(name: str) -> set:
    """The module_utils files ``name`` imports (``from ...module_utils import a, b`` or ``from ...module_utils.a``)."""
    found = set()
    for module, names in IMPORT.findall((MODULE_UTILS / name).read_text(encoding="utf-8")):
        if module:
            found.add(module + ".py")
        else:
            names = re.sub(r"#[^\n]*", "", names.strip("()"))
            found.update(n.split(" as ")[0].strip() + ".py" for n in names.split(",") if n.strip())
    return {f for f in found if (MODULE_UTILS / f).is_file()}


def test_the_controllers_module_utils_are_closed_under_their_imports():
    listed = set(yaml.safe_load((REPO / "roles/controller/vars/main.yml").read_text())["pairserve_controller_module_utils"])
    missing = {(name, dep) for name in listed for dep in imported(name) if dep not in listed}
    assert not missing, "imported but not copied to the controller: %s" % sorted(missing)
    # the check can fail: routes.py imports reach.py
    assert "reach.py" in imported("routes.py")
