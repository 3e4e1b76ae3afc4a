"""What the lab's test suites (lab/scenarios/*/tests) read from the runs the lab made (`python -m lab`): the structured task results
of each play (the pairserve_results callback's JSON lines, <name>.jsonl beside <name>.log), exit status files and
the request loop's summaries. Assert on the results (what each module did and returned), not on the log's text:
the log is for people, and its task titles and messages change. The lab itself is lab/api.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.recap import TaskResults, parse_recap


def recap(log: Path) -> dict:
    """{host: {ok, changed, failed, ...}} from a play log's PLAY RECAP (support.recap.parse_recap)."""
    parsed = parse_recap(log.read_text())
    assert parsed is not None, f"{log} has no PLAY RECAP: the play did not finish"
    return parsed


def results(path: Path) -> TaskResults:
    """The task results of one run the lab made: `path` is its .jsonl or its .log (the .jsonl beside it).
    A missing file fails the test (it never skips): the step did not run, or ran without the callback."""
    path = Path(path)
    jsonl = path.with_suffix(".jsonl") if path.suffix == ".log" else path
    if not jsonl.exists():
        log = jsonl.with_suffix(".log")
        pytest.fail(f"no task results {jsonl}: the step did not run (or ran without the pairserve_results "
                    f"callback){'; its log: ' + str(log) if log.exists() else ', nor left a log'}", pytrace=False)
    return TaskResults.from_lines(jsonl.read_text(encoding="utf-8"), str(jsonl))


def rc(path: Path) -> int:
    return int(path.read_text().strip())


def load_summary(scenario_dir: Path) -> dict:
    return json.loads((scenario_dir / "load.json").read_text())


def skip_unless_all_steps(scenario_dir: Path, what: str) -> None:
    """Skip a check whose step `python -m lab test` leaves out (PAIRSERVE_LAB_DAY2_STEPS=core), saying so; the
    scenario writes which steps it ran to <dir>/steps. A missing file is a scenario that did not run: fail."""
    steps = (scenario_dir / "steps").read_text().strip()
    if steps != "all":
        pytest.skip(f"{what}: not run by this lab run (PAIRSERVE_LAB_DAY2_STEPS={steps}, the default of "
                    "`python -m lab test`; `python -m lab scenario NAME` and `make molecule` run it)")
