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

from support.scripts import load

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
    clean = _tarball(tmp_path / "clean.tar.gz", ["plugins/modules/x.py", "tools/record_nvml.py", "labels.md"])
    assert _check(galaxy, clean).returncode == 0
    for leaked, pattern in (("lab/api.py", "lab"), ("scripts/gpu_proof/proof.py", "scripts/gpu_proof"),
                            ("plugins/x.pyc", "*.pyc")):
        got = _check(galaxy, _tarball(tmp_path / "leak.tar.gz", ["plugins/modules/x.py", leaked]))
        assert got.returncode == 1 and "%s (build_ignore: %s)" % (leaked, pattern) in got.stderr, got.stderr


def test_the_repositorys_list_keeps_the_lab_the_development_tools_and_the_proofs_out():
    patterns = yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"]
    checker = load(SCRIPT, "check_tarball")
    for kept_out in ("lab/api.py", "molecule/default/molecule.yml", "lab/inventory/hosts.yml", "lab/__main__.py",
                     "lab/scenarios/upgrade/steps.py", "lab/stand_ins/nvidia-smi", "scripts/gpu_proof/proof.py",
                     "scripts/pytest.sh", "benchmarks/README.md",
                     "Makefile", ".ci/run"):
        assert checker.kept_out(kept_out, patterns), kept_out
    # the operator tools ship, and so does the power role's renderer; nothing of scripts/ does
    for ships in ("tools/README.md", "tools/build_wheelhouse.sh", "tools/build_controller_wheels.sh",
                  "tools/resolve_constraints.py", "tools/record_nvml.py", "roles/power/files/power_report.py"):
        assert (REPO / ships).exists() and checker.kept_out(ships, patterns) is None, ships
    assert all(checker.kept_out(str(p.relative_to(REPO)), patterns) for p in (REPO / "scripts").rglob("*") if p.is_file())
