"""The controller (docs/controller.md) in weights mode on replicas of different speed: node-b's replica held to a
fraction of its core, both replicas measured with playbooks/bench.yml, the controller turned on with those speeds;
the route's weights followed through idle, a backlog on each replica and a mixed load through the route
(lab/queue_weights.py); then the controller is turned off again and node-b's replica gets its whole core back.

Leaves in .lab/queue_weights/: bench.* and bench/ (the bench run and its reports), controller-base.yml (the lab's
settings) and controller.yml (with the measured speeds: the settings the plays ran with), enable.* and disable.*,
result.json (the demonstration's figures), demo.rc (only when there were no speeds or the demonstration failed: its
exit status) and controller.journal (the controller's journal of this run).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lab import engines, host
from lab.scenarios import Scenario
# The controller's journal of this run, kept as the sleep_wake scenario keeps it.
from lab.scenarios.sleep_wake.steps import node_now, save_journal

# How much of its core node-b's replica keeps, in per cent (PAIRSERVE_LAB_SLOW_QUOTA). Half a core makes it about
# 2 times slower at decode and 5 times at prefill than node-a's. Not less: at 30 % vLLM 0.25.1's CPU engine can hang
# in a decode step under the mixed load (its worker never answers: "RPC call to sample_tokens timed out" after
# 300 s, and GPUStack restarts the instance), a failure of the stand-in, not of the controller, which can also leave
# a replica not running when the controller is turned off.
DEFAULT_SLOW_QUOTA = 50

# The controller's lab settings: look every 2 s, at most one route update per 4 s, the default dead band, and a
# 5 s horizon: the tiny model's requests take seconds, where the seed's take minutes (30 s there).
# lab/queue_weights.py adds the replicas' measured speeds to them.
BASE_SETTINGS = """\
pairserve_controller_enabled: true
pairserve_controller_mode: weights
pairserve_controller_interval: 2
pairserve_controller_hold: 4
pairserve_controller_min_change: 5
pairserve_controller_horizon: 5
pairserve_controller_prior_prompt_tokens: 400
pairserve_controller_prior_generation_tokens: 96
"""


def slow_quota(environ=None) -> int:
    """The per cent of its core node-b's replica keeps: PAIRSERVE_LAB_SLOW_QUOTA, 50 when unset or empty."""
    value = (os.environ if environ is None else environ).get("PAIRSERVE_LAB_SLOW_QUOTA") or str(DEFAULT_SLOW_QUOTA)
    try:
        return int(value)
    except ValueError:
        raise host.LabError("PAIRSERVE_LAB_SLOW_QUOTA is a whole per cent, not %r" % (value,)) from None


def baseline_results(bench_dir: Path) -> Path | None:
    """The bench run's baseline measurement (<report dir>/<stamp>-<label>-baseline/results.json): the last one by
    name (the stamp orders them), or None when the run left none."""
    found = sorted(str(p) for p in Path(bench_dir).rglob("results.json") if p.parent.name.endswith("-baseline"))
    return Path(found[-1]) if found else None


def run(scenario: Scenario) -> None:
    """node-b's replica slowed, then measured and steered (measure_and_steer), then given its whole core back."""
    scenario.dir.mkdir(parents=True, exist_ok=True)
    # The controller's venv installs from its wheels (not part of the lab's start): built once.
    host.run(["bash", "tools/build_controller_wheels.sh"])
    scenario.prepare("bench", "demo.rc", "result.json")
    # Replicas of different speed, as the seed's pairs are: node-b's replica container gets a fraction of its core
    # (its cgroup's CPU quota; the container is left as it is otherwise).
    quota = slow_quota()
    container = engines.replica_container("qwen-node-b")
    scenario.say("node-b's replica (%s) held to %d %% of its core" % (container, quota))
    engines.cpu_quota(container, quota * 1000)
    try:
        measure_and_steer(scenario)
    finally:
        # Its whole core back, whatever happened in between.
        engines.cpu_quota(container, -1)


def measure_and_steer(scenario: Scenario) -> None:
    """The bench run, then the controller on with the speeds it measured, the demonstration, the controller off."""
    bench = scenario.path("bench")
    scenario.say("both replicas measured (playbooks/bench.yml, replicas only)")
    scenario.play("bench", "playbooks/bench.yml", "-e", "pairserve_bench_measure_route=false",
                  "-e", "pairserve_bench_report_dir=%s" % bench, "-e", "pairserve_bench_label=queue-weights")
    base = scenario.path("controller-base.yml")
    base.write_text(BASE_SETTINGS, encoding="utf-8")
    settings = scenario.path("controller.yml")
    results = baseline_results(bench)
    if results is None or host.run([host.PYTHON, "-m", "lab.queue_weights", "speeds", "--bench", results,
                                    "--base", base, "--out", settings], check=False).returncode != 0:
        print("lab %s: no speeds from the bench run (see %s)" % (scenario.name, scenario.path("bench.log")),
              file=sys.stderr, flush=True)
        scenario.path("demo.rc").write_text("1\n", encoding="utf-8")
        return
    scenario.say("the controller on (weights mode, the measured speeds)")
    since = node_now()
    scenario.play("enable", "playbooks/controller.yml", "-e", "@%s" % settings)
    demo = host.run([host.PYTHON, "-m", "lab.queue_weights", "demo", "--vars", settings, "--dir", scenario.dir,
                     "--result", scenario.path("result.json")], check=False)
    if demo.returncode != 0:
        scenario.path("demo.rc").write_text("%d\n" % demo.returncode, encoding="utf-8")
    save_journal(scenario.path("controller.journal"), since)
    scenario.say("the controller off again (the route gets its static weights back)")
    scenario.play("disable", "playbooks/controller.yml", "-e", "@%s" % settings,
                  "-e", "pairserve_controller_enabled=false")
