"""The lab suites import the lab's API (lab/api.py) and their shared helpers from tests/support (lab_suite.py)."""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[3]), str(Path(__file__).resolve().parents[3] / "tests")]
