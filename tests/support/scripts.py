"""Load one of the repository's stand-alone scripts (not a package) as a module, by path, once per session."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIMULATION = REPO / "scripts" / "simulate_routing.py"


def load(path: Path, name: str):
    """The module of the script at ``path`` under ``name`` (registered in sys.modules: dataclasses need it)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
