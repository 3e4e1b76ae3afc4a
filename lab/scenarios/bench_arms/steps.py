"""playbooks/bench.yml with one A/B arm on node-b, under the request loop: first in check mode (it says what it would
boot and changes nothing), then for real (node-b drained, its replica booted through GPUStack with the arm's
settings, measured against the baseline, put back).

Leaves in .lab/bench_arms/: arms.yml (the arms, as extra vars), check.* and bench.* (the plays), reports/ (the bench
reports), before.json, after-check.json and after.json (GPUStack's models, instances and the route's weights before,
after the check run and after the real one) and load.json (the request loop's summary).
"""

from __future__ import annotations

import json
from pathlib import Path

from lab import host
from lab.api import items, route_weights
from lab.scenarios import Scenario

# One A/B arm on node-b, booted through GPUStack: --max-num-seqs 2 instead of the lab profile's 8 (vLLM 0.27.1's
# CPU build parses it; the concurrency-4 run then queues half its streams, so the arm should regress throughput).
# A user writes the arms in group_vars; the lab passes them as an extra-vars file.
ARMS = """\
pairserve_bench_label: arms
pairserve_bench_report_dir: {report_dir}
pairserve_bench_arm_boot_timeout: 600
pairserve_bench_arms:
  - name: seqs-2
    node: node-b
    replica: {{max_num_seqs: 2}}
"""


def arms_settings(report_dir: Path) -> str:
    """The arms file, its reports going to `report_dir`."""
    return ARMS.format(report_dir=report_dir)


def arms_view(models: list, instances: list, weights: dict) -> dict:
    """What the suite compares across the runs: GPUStack's models and instances by name, and the route's weights."""
    return {"models": {m["name"]: m for m in models},
            "instances": {i["model_name"]: i for i in instances},
            "weights": weights}


def arms_snapshot(path: Path) -> None:
    """GPUStack's models, instances and the route's weights now, into `path` (JSON)."""
    key = host.secret("node-a", "management-api-key")
    try:
        snap = arms_view(items("/v2/models", key), items("/v2/model-instances", key), route_weights(key))
    except (AssertionError, OSError, ValueError) as err:
        raise host.LabError("GPUStack's models, instances and route weights for %s: %s" % (path, err)) from err
    Path(path).write_text(json.dumps(snap, indent=1), encoding="utf-8")


def run(scenario: Scenario) -> None:
    """bench.yml in check mode, then for real, under the request loop; GPUStack snapshotted around each."""
    scenario.prepare("reports")
    arms = scenario.path("arms.yml")
    arms.write_text(arms_settings(scenario.path("reports")), encoding="utf-8")
    arms_snapshot(scenario.path("before.json"))
    load = scenario.load().start()
    try:
        scenario.say("playbooks/bench.yml --check (says what it would boot, changes nothing)")
        scenario.play("check", "playbooks/bench.yml", "--check", "-e", "@%s" % arms)
        arms_snapshot(scenario.path("after-check.json"))
        scenario.say("playbooks/bench.yml with arm seqs-2 on node-b (drain, boot, request, measure, put back)")
        scenario.play("bench", "playbooks/bench.yml", "-e", "@%s" % arms)
        scenario.say("the route under load while the plays ran")
    finally:
        load.stop()
    arms_snapshot(scenario.path("after.json"))
