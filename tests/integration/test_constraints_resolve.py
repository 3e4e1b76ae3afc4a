"""Every GPUStack constraints file resolves, with pip's real resolver against the package index, for the Python it
serves: `pip install --dry-run --report` of gpustack==<release> with that file alone, exactly as the
gpustack_install role installs, for the target it was resolved for (wheels only, that CPython, its system's glibc,
that Python's environment markers; tools/resolve_constraints.py). A file passes when pip resolves it and installs
exactly its pins: nothing floats, nothing is stale, the release's holds are kept.

Needs the package index (https://pypi.org/simple, as CI has): without it pip fails and so does the test. pip's HTTP
cache (.cache/pip-resolve) makes later runs cheap.
"""

from __future__ import annotations

import re

import pytest

from support.ansible_runner import REPO
from support.scripts import load

resolver = load(REPO / "tools" / "resolve_constraints.py", "resolve_constraints")
RELEASES = resolver.releases()
PYTHONS = sorted(resolver.TARGETS)


def test_every_release_has_a_file_for_each_supported_python_and_no_other():
    assert {"2.2.3", "2.3.0"} <= set(RELEASES)
    assert PYTHONS == ["3.10", "3.11", "3.12"]
    found = sorted(p.relative_to(resolver.FILES).as_posix() for p in resolver.FILES.glob("py*/*.constraints.txt"))
    assert found == sorted(f"py{m}/gpustack-{r}.constraints.txt" for r in RELEASES for m in PYTHONS)
    # The systems preflight accepts are the ones the files are resolved for, and it accepts exactly these Pythons.
    defaults = (REPO / "roles" / "preflight" / "defaults" / "main.yml").read_text()
    assert sorted(t.system for t in resolver.TARGETS.values()) == sorted(
        re.search(r"pairserve_preflight_supported_os:\n((?:  - .*\n)+)", defaults).group(1).replace("  - ", "").split("\n")[:-1])
    assert re.findall(r'  - "(3\.\d+)"', defaults.split("pairserve_preflight_supported_python:")[1].split("\n\n")[0]) == PYTHONS


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("release", RELEASES)
def test_the_constraints_file_resolves_to_itself(release, python):
    assert resolver.check(release, python) == []


def test_a_file_that_does_not_resolve_fails():
    """The check is not vacuous: Python 3.11's pins on Python 3.10 (numpy 2.4.6 and 16 more need 3.11) do not resolve."""
    with pytest.raises(resolver.ResolutionError) as err:
        resolver.check("2.2.3", "3.10", lock=resolver.lock_path("2.2.3", "3.11"))
    assert "for Python 3.10 (Ubuntu 22.04)" in str(err.value) and "ResolutionImpossible" in str(err.value)
