"""One name per lab scenario: the folders of lab/scenarios with steps are the molecule scenarios (molecule/<name>,
default aside), each molecule scenario names itself and adds nothing to the shared base, its tests live beside its
steps, and `python -m lab scenario` refuses an unknown name, listing them."""

from __future__ import annotations

import subprocess
import sys

import yaml

from support.ansible_runner import REPO

from lab import scenarios


def _molecule_day2() -> set:
    return {p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml")} - {"default"}


def test_the_scenarios_are_the_molecule_scenarios():
    assert len(scenarios.names()) == 10, scenarios.names()
    assert set(scenarios.names()) == _molecule_day2()


def test_an_unknown_scenario_is_refused_naming_every_scenario():
    res = subprocess.run([sys.executable, "-m", "lab", "scenario", "swap"], capture_output=True, text=True,
                         timeout=60, check=False, cwd=REPO)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "invalid choice: 'swap'" in res.stderr, res.stderr
    for name in scenarios.names():
        assert "'%s'" % name in res.stderr, (name, res.stderr)


def test_each_molecule_scenario_names_itself_and_adds_nothing_else():
    for name in sorted(_molecule_day2()):
        config = yaml.safe_load((REPO / "molecule" / name / "molecule.yml").read_text())
        assert config == {"scenario": {"name": name}}, (name, config)
        assert sorted(p.name for p in (REPO / "molecule" / name).iterdir()) == ["molecule.yml"], name


def test_each_scenario_has_its_steps_and_tests_together():
    for name in scenarios.names():
        tests = sorted(p.name for p in scenarios.tests_dir(name).glob("test_*.py"))
        assert tests, "lab/scenarios/%s/tests has no tests" % name
        assert callable(__import__("lab.scenarios.%s.steps" % name, fromlist=["run"]).run), name
    assert sorted(p.name for p in scenarios.tests_dir("default").glob("test_*.py"))


def test_the_shared_side_effect_runs_the_scenario_by_its_molecule_name():
    base = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())
    assert base["provisioner"]["playbooks"]["side_effect"] == "../default/side_effect.yml"
    tasks = yaml.safe_load((REPO / "molecule" / "default" / "side_effect.yml").read_text())[0]["tasks"]
    argv = [t["ansible.builtin.command"]["argv"] for t in tasks if "ansible.builtin.command" in t]
    assert len(argv) == 1 and argv[0][1:4] == ["-m", "lab", "scenario"], argv
    assert "MOLECULE_SCENARIO_NAME" in argv[0][4], argv
    verify = yaml.safe_load((REPO / "molecule" / "default" / "verify.yml").read_text())[0]
    assert verify["vars"]["pairserve_mol_scenario"].endswith(
        "/lab/scenarios/{{ lookup('ansible.builtin.env', 'MOLECULE_SCENARIO_NAME') }}"), verify["vars"]
