"""The lab suites import their shared helpers from tests/support (tests/support/lab_api.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
