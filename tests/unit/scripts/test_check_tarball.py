"""scripts/check_tarball.py, release_check's reading of galaxy.yml's build_ignore (the one list of what does not
ship): an entry a pattern matches, by its own path or a folder above it, fails the check, naming both; a tarball
without one passes; the repository's own galaxy.yml keeps the lab, the development tools and the proofs out."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "check_tarball.py"


def _tarball(path: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 2
            archive.addfile(info, io.BytesIO(b"x\n"))
    return path


def _check(galaxy: Path, tarball: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(galaxy), str(tarball)], capture_output=True, text=True,
                          check=False)


def test_an_entry_a_pattern_keeps_out_fails_the_check_naming_it(tmp_path):
    galaxy = tmp_path / "galaxy.yml"
    galaxy.write_text(yaml.safe_dump({"build_ignore": ["lab", "scripts/gpu_proof", "*.pyc"]}))
    clean = _tarball(tmp_path / "clean.tar.gz", ["plugins/modules/x.py", "scripts/record_nvml.py", "labels.md"])
    assert _check(galaxy, clean).returncode == 0
    for leaked, pattern in (("lab/api.py", "lab"), ("scripts/gpu_proof/proof.py", "scripts/gpu_proof"),
                            ("plugins/x.pyc", "*.pyc")):
        got = _check(galaxy, _tarball(tmp_path / "leak.tar.gz", ["plugins/modules/x.py", leaked]))
        assert got.returncode == 1 and "%s (build_ignore: %s)" % (leaked, pattern) in got.stderr, got.stderr


def test_the_repositorys_list_keeps_the_lab_the_development_tools_and_the_proofs_out():
    patterns = yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"]
    for kept_out in ("lab", "molecule", "inventory/lab", "scripts/lab.sh", "scripts/gpu_proof", "scripts/pytest.sh",
                     "benchmarks", "Makefile", ".ci"):
        assert kept_out in patterns, kept_out
    for ships in ("scripts/build_wheelhouse.sh", "scripts/resolve_constraints.py", "scripts/record_nvml.py",
                  "scripts/power_report.py"):
        assert (REPO / ships).exists() and ships not in patterns, ships
