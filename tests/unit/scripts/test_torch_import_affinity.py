"""lab/stand_ins/torch_import_affinity.py: `import torch` runs on the CPUs of VLLM_CPU_OMP_THREADS_BIND, nothing else.

The lab's replica images load the hook from a .pth line; here it is imported the same way, first, in a fresh
interpreter. The package it narrows is a stand-in named `torch` on a temporary path that records the CPUs it was
allowed while its module code ran (what MKL's core count inside the real torch 2.11.0 sees); the real torch is not
in the test venv, and the lab's image build imports the real one through the hook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HOOK_DIR = Path(__file__).resolve().parents[3] / "lab" / "stand_ins"
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []

PROBE = """
import json, os, sys
import torch_import_affinity
import torch, torch.sub
print(json.dumps({"during": torch.DURING, "sub": torch.sub.DURING, "after": sorted(os.sched_getaffinity(0)),
                  "hook_left": [type(f).__name__ for f in sys.meta_path if type(f).__module__ == "torch_import_affinity"],
                  "loader": type(torch.__spec__.loader).__name__, "file": os.path.basename(torch.__file__)}))
"""


def _probe(tmp_path, bind):
    pkg = tmp_path / "torch"
    pkg.mkdir(exist_ok=True)
    record = "import os\nDURING = sorted(os.sched_getaffinity(0))\n"
    (pkg / "__init__.py").write_text(record)
    (pkg / "sub.py").write_text(record)
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_OMP_THREADS_BIND"}
    if bind is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = bind
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR), str(tmp_path)])
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(len(CPUS) < 2, reason="needs at least two CPUs to narrow the affinity")
@pytest.mark.parametrize("bind,want", [
    (str(CPUS[-1]) if CPUS else "", lambda: [CPUS[-1]]),
    ("%d-%d" % (CPUS[0], CPUS[1]) if len(CPUS) > 1 else "", lambda: CPUS[:2]),
    ("%d|%d" % (CPUS[1], CPUS[0]) if len(CPUS) > 1 else "", lambda: CPUS[:2]),
])
def test_torch_module_code_runs_on_the_bound_cpus(tmp_path, bind, want):
    seen = _probe(tmp_path, bind)
    assert seen["during"] == want()
    # Only the package's own import is narrowed (MKL counts once, in libtorch's initialisation); its submodules
    # import after the process has its whole mask back, and so does everything after.
    assert seen["sub"] == CPUS
    assert seen["after"] == CPUS
    # The finder takes itself out of sys.meta_path at the first `import torch`, and the module's spec keeps
    # the hook as its loader only as a pass-through.
    assert seen["hook_left"] == []
    assert seen["loader"] == "_NarrowedImport"
    assert seen["file"] == "__init__.py"


@pytest.mark.skipif(len(CPUS) < 2, reason="needs at least two CPUs to tell a narrowed import from a plain one")
@pytest.mark.parametrize("bind", [None, "", "auto", "nobind", "0-x", "99999"])
def test_values_that_are_not_bound_cpus_leave_the_import_alone(tmp_path, bind):
    seen = _probe(tmp_path, bind)
    assert seen["during"] == CPUS
    assert seen["after"] == CPUS
    if bind in (None, "", "auto", "nobind", "0-x"):
        assert seen["loader"] != "_NarrowedImport"
