"""The lab suites (molecule/<scenario>/tests) import the lab's API (lab/) and the test harness (tests/support/): the
repository root and tests/ go first on the import path, once for every scenario (pytest loads this file for any test
under molecule/, whatever --rootdir a run names: the repository's pytest.ini bounds the conftest search)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (str(REPO / "tests"), str(REPO)):
    if path not in sys.path:
        sys.path.insert(0, path)
