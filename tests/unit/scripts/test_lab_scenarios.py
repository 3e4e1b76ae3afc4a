"""One name per lab scenario: scripts/lab.sh's scenarios are the molecule scenarios (molecule/<name>, default aside),
each run by `scripts/lab.sh <name>`, which is what its side effect runs; an unknown name is refused listing them."""

from __future__ import annotations

import re
import subprocess

import yaml

from support.ansible_runner import REPO


def _molecule_day2() -> set:
    return {p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml")} - {"default"}


def test_an_unknown_scenario_is_refused_naming_every_scenario():
    res = subprocess.run(["bash", str(REPO / "scripts" / "lab.sh"), "swap"], capture_output=True, text=True,
                         timeout=60, check=False, cwd=REPO)
    assert res.returncode == 2, res.stdout + res.stderr
    listed = re.search(r"SCENARIO: (.*)", res.stderr).group(1).split()
    assert set(listed) == _molecule_day2(), listed


def test_each_molecule_scenario_runs_its_own_name():
    for name in sorted(_molecule_day2()):
        tasks = yaml.safe_load((REPO / "molecule" / name / "side_effect.yml").read_text())[0]["tasks"]
        commands = [t["ansible.builtin.command"]["cmd"] for t in tasks if "ansible.builtin.command" in t]
        assert commands == ["bash scripts/lab.sh %s" % name], (name, commands)
