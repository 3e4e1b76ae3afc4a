"""The lab's day-2 scenarios, each under one name: lab/scenarios/<name>/ holds its steps (steps.py, a function
``run(scenario)``) and its tests (tests/); molecule/<name>/molecule.yml makes it a molecule scenario (its side effect
runs the steps, its verify runs the tests). Each scenario runs on a converged lab and keeps what it did under
.lab/<name>/ (plays' logs, task results and exit status, the request loop's summaries, snapshots of GPUStack).

    python -m lab scenario NAME        the steps, on the running lab
    python -m lab test                 ... and those PAIRSERVE_LAB_SCENARIOS names (patch_restart by default)

A scenario whose step fails raises host.LabError; a play that fails does not (its tests judge its results).
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

from lab import host, plays

HERE = Path(__file__).resolve().parent


def names() -> list[str]:
    """Every scenario: the folders here with steps."""
    return sorted(p.name for p in HERE.iterdir() if (p / "steps.py").is_file())


def tests_dir(name: str) -> Path:
    return HERE / name / "tests"


class Scenario:
    """One run of a scenario: its directory under .lab/, which steps run ("all", or "core" in `python -m lab test`,
    where the longest steps stay out and their checks skip, saying so), and how it runs plays."""

    def __init__(self, name: str, steps: str = "all"):
        if steps not in ("all", "core"):
            raise host.LabError("scenario steps are 'all' or 'core', not %r" % (steps,))
        self.name = name
        self.steps = steps
        self.dir = host.STATE / name

    def prepare(self, *patterns: str) -> None:
        """Its directory, without what an earlier run left matching `patterns` (files or folders)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for pattern in patterns:
            for path in self.dir.glob(pattern):
                # a link is removed itself, never what it points to
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()

    def path(self, name: str) -> Path:
        return self.dir / name

    def play(self, name: str, book: str, *args) -> int:
        """A play run kept as <dir>/<name>.{log,jsonl,rc}."""
        return plays.play(self.dir / ("%s.log" % name), book, *args)

    def rc(self, name: str) -> int | None:
        try:
            return int((self.dir / ("%s.rc" % name)).read_text().strip())
        except (OSError, ValueError):
            return None

    def load(self, sub: str = "") -> plays.Load:
        """The request loop kept in <dir> (or <dir>/<sub>)."""
        return plays.Load(self.dir / sub if sub else self.dir)

    def record_steps(self) -> None:
        """Which steps ran, for the suites (tests/support/lab_suite.skip_unless_all_steps)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "steps").write_text(self.steps + "\n")

    def say(self, message: str) -> None:
        host.say("=== lab %s: %s" % (self.name, message))


def run(name: str, steps: str = "all") -> None:
    """Run one scenario's steps on the converged lab; LabError when one of its steps (not a play) failed."""
    if name not in names():
        raise host.LabError("no scenario %r; the scenarios: %s" % (name, " ".join(names())))
    scenario = Scenario(name, steps)
    scenario.dir.mkdir(parents=True, exist_ok=True)
    module = importlib.import_module("lab.scenarios.%s.steps" % name)
    timer = plays.Phases()
    timer.run(name, module.run, scenario)
