"""Load one of the repository's stand-alone scripts (not a package) as a module, by path, once per session; and
make the controller's package importable as the service imports it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIMULATION = REPO / "scripts" / "simulate_routing.py"
# The controller package and the collection it imports (bootstrap links this checkout there), as on a node, where
# the role puts the package beside a copy of the collection's module_utils.
CONTROLLER_FILES = REPO / "roles" / "controller" / "files"
COLLECTIONS = REPO / ".cache" / "collections"


def load(path: Path, name: str):
    """The module of the script at ``path`` under ``name`` (registered in sys.modules: dataclasses need it)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def controller_path():
    """Put the controller package and the collection on sys.path (idempotent)."""
    for path in (str(COLLECTIONS), str(CONTROLLER_FILES)):
        if path not in sys.path:
            sys.path.insert(0, path)
