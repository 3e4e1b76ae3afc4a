"""The lab: what stands in for real nodes on one machine without GPUs (docs/lab.md). Not part of the collection:
the built tarball leaves this folder out, and nothing under plugins/ or roles/ imports it.

The lab uses the test harness (tests/support: the local hub's server, free ports, the results callback), never the
other way round: importing the lab puts tests/ on the import path once, as tests/conftest.py does for the suite.
"""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
