"""Node-b rebooted by playbooks/maintenance.yml under the request loop; then check mode; then site.yml.

The node is drained, its worker put in GPUStack's maintenance mode and its replica stopped; the reboot is a restart
of its container (lab/reboot_watcher.py, in the background while the play runs). The loop counts every request
meanwhile; then maintenance.yml in check mode (a maintenance is an act: check mode says what it would do and changes
nothing) and site.yml (changed=0: the node is back as the site declares it).

Leaves in .lab/maintenance/: maintenance.*, check.* and rerun.* (.log/.jsonl/.rc), load.json (the request loop's
summary), reboot-watcher.log, and before.json, after.json and after-check.json (GPUStack's instances, workers and
route weights, and when node-b's container started).
"""

from __future__ import annotations

import json
from pathlib import Path

from lab import host, snapshots
from lab.scenarios import Scenario

REBOOTS = host.RUN_DIR / "reboot"


def maintenance_shape(models: list, instances: list, workers: list, targets: list, node_b_started: str) -> dict:
    """GPUStack's instances, workers and route weights by name (from /v2/models, /v2/model-instances, /v2/workers,
    /v2/model-route-targets; a target of a model GPUStack no longer lists keeps its id as its name), and when
    node-b's container started (a reboot restarts it)."""
    names = {m["id"]: m["name"] for m in models}
    return {"instances": {i["model_name"]: {"id": i["id"], "state": i["state"]} for i in instances},
            "workers": {w["name"]: {"state": w["state"], "maintenance": w.get("maintenance")} for w in workers},
            "weights": {names.get(t["model_id"], str(t["model_id"])): t["weight"] for t in targets
                        if t.get("model_id") is not None},
            "node_b_started": node_b_started}


def maintenance_snapshot(path: Path) -> None:
    started = host.output(["podman", "inspect", "--format", "{{.State.StartedAt}}", host.container("node-b")])
    models, instances, workers, targets = snapshots.gpustack(
        "maintenance snapshot %s" % path, "/v2/models", "/v2/model-instances", "/v2/workers", "/v2/model-route-targets")
    Path(path).write_text(json.dumps(maintenance_shape(models, instances, workers, targets, started), indent=1))


def run(scenario: Scenario) -> None:
    out = scenario.dir
    scenario.prepare("*.rc", "*.jsonl", "*.json", "*.log")
    maintenance_snapshot(out / "before.json")
    REBOOTS.mkdir(parents=True, exist_ok=True)
    watcher = out / "reboot-watcher.pid"
    host.spawn([host.PYTHON, "-m", "lab.reboot_watcher", str(REBOOTS)], out / "reboot-watcher.log", watcher)
    try:
        load = scenario.load().start()
        try:
            scenario.say("playbooks/maintenance.yml --limit node-b (reboot) under the request loop")
            scenario.play("maintenance", "playbooks/maintenance.yml", "--limit", "node-b")
        finally:
            load.stop()
    finally:
        host.stop_pid(watcher)
        try:
            REBOOTS.rmdir()
        except OSError:
            pass
    maintenance_snapshot(out / "after.json")

    scenario.say("maintenance.yml --check (changed=0, nothing done)")
    scenario.play("check", "playbooks/maintenance.yml", "--limit", "node-b", "--check")
    maintenance_snapshot(out / "after-check.json")

    scenario.say("site.yml (changed=0)")
    scenario.play("rerun", "site.yml")
