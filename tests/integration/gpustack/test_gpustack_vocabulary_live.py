"""The committed GPUStack vocabulary (plugins/module_utils/gpustack_vocabulary_table.py) is what the pinned GPUStack's
own sources say: scripts/gpustack_vocabulary.py reads the venv this tier builds (the lab's pin, lab/pins.py) and must
give the table's entry, and GPUStack's own password check must agree with the collection's on sample passwords."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import gpustack_vocabulary as gv
from ansible_collections.pairserve.llm.plugins.module_utils.gpustack_vocabulary_table import VOCABULARY
from lab import pins
from support.gpustack_server import ensure_venv
from support.scripts import load

REPO = Path(__file__).resolve().parents[3]
generator = load(REPO / "scripts" / "gpustack_vocabulary.py", "gpustack_vocabulary_generator")

pytestmark = pytest.mark.slow

SAMPLES = ("Abcdef1!", "abcdef1!", "ABCDEF1!", "Abcdefg!", "Abcdefg1", "Ab1-xyzw", "lab-only-admin_Xq7vR2")


def _site_packages(venv):
    found = sorted(Path(venv).glob("lib/python3*/site-packages"))
    assert found, "no site-packages in %s" % venv
    return found[0]


def test_the_table_is_the_pinned_release():
    version, table = generator.read(_site_packages(ensure_venv(pins.GPUSTACK)))
    assert version == pins.GPUSTACK
    assert table == VOCABULARY[version], "regenerate: scripts/gpustack_vocabulary.py --write <site-packages>"


def test_gpustack_itself_agrees_on_each_sample():
    """GPUStack's own _validate_password, run in its venv, against the collection's reading of the same rule."""
    python = Path(ensure_venv(pins.GPUSTACK)) / "bin" / "python"
    code = ("import json, sys\nfrom gpustack.schemas.users import _validate_password\nout = {}\n"
            "for p in json.load(sys.stdin):\n    try:\n        _validate_password(p); out[p] = True\n"
            "    except ValueError:\n        out[p] = False\nprint(json.dumps(out))")
    import json  # pylint: disable=import-outside-toplevel
    proc = subprocess.run([str(python), "-c", code], input=json.dumps(SAMPLES), capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    upstream = json.loads(proc.stdout.strip().splitlines()[-1])
    for password in SAMPLES:
        ours = not [p for p in gv.password_problems(pins.GPUSTACK, password) if "password rule" in p]
        assert ours == upstream[password], password
