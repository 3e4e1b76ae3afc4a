"""Shared pytest setup.

- tests/support is importable as `support` (the GPUStack and vLLM fixtures, the lab suites' helpers), and the
  repository root (pytest.ini: pythonpath) makes the lab's package importable as `lab` (the Ansible runner, the
  local hub and its test checkpoint, the CPU vLLM server): the lab and the benchmarks use those too.
- The collection is importable as `ansible_collections.pairserve.llm` through the link `make deps` creates
  in .cache/collections, so module_utils are tested as the modules import them.
- The controller's package (roles/controller/files/pairserve_controller) is importable as `pairserve_controller`,
  as its wheel installs it on a node (tests/unit/plugins/plugin_utils/test_controller_wheel.py tests the wheel).
"""

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent
for _path in (_TESTS, _TESTS.parent / ".cache" / "collections", _TESTS.parent / "roles" / "controller" / "files"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
