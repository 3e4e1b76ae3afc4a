"""The lab suites (lab/scenarios/<name>/tests) import the lab's API (lab/), the test harness (tests/support/) and the
collection as its modules import it (``ansible_collections.pairserve.llm``, the link `make deps` makes in
.cache/collections): those go first on the import path, once for every scenario (pytest loads this file for any test
under lab/scenarios/, whatever --rootdir a run names: the repository's pytest.ini bounds the conftest search)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for path in (str(REPO / ".cache" / "collections"), str(REPO / "tests"), str(REPO)):
    if path not in sys.path:
        sys.path.insert(0, path)
