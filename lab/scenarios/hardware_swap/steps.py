"""The hardware-swap scenario's steps, on a converged lab.

node-b's recorded cards become 2x RTX 4090, then `playbooks/rebuild_node.yml --limit node-b` runs twice under the
request loop; with all steps, node-b is then reinstalled (its worker identity and pairs record wiped) and the same
play runs once more under a second loop.

What it keeps in .lab/hardware_swap/: before.json (GPUStack's models and instances before the swap), each play's
.log/.jsonl/.rc (rebuild-1, rebuild-2, reinstall), steps, load.json and reinstall/load.json.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from lab import host, nodes
from lab.api import items, read_keys
from lab.scenarios import Scenario

BOOK = "playbooks/rebuild_node.yml"
# node-b's new cards: a recorded NVML host with 2x RTX 4090 (24 GiB).
NEW_CARDS = host.REPO / "tests" / "fixtures" / "nvml" / "node-b-2x4090.json"


def snapshot_models(path: Path) -> None:
    """GPUStack's models and instances by name, written to `path`: the suite proves node-a's replica untouched."""
    try:
        key = read_keys()["management"]
        snap = {"models": {m["name"]: m for m in items("/v2/models", key)},
                "instances": {i["model_name"]: i for i in items("/v2/model-instances", key)}}
    except (AssertionError, OSError, ValueError, KeyError, subprocess.CalledProcessError) as err:
        raise host.LabError("lab swap: GPUStack's models could not be read: %s" % err) from err
    Path(path).write_text(json.dumps(snap, indent=1), encoding="utf-8")


def wait_worker_down(node: str, timeout: float = 300.0, interval: float = 2.0) -> float:
    """Wait until GPUStack no longer shows `node`'s worker ready (a worker record that is gone counts as down);
    the seconds it took. LabError after `timeout` seconds."""
    try:
        key = read_keys()["management"]
    except subprocess.CalledProcessError as err:
        raise host.LabError("lab swap: the management key could not be read: %s" % err) from err
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            workers = items("/v2/workers", key)
        except (AssertionError, OSError, ValueError) as err:
            raise host.LabError("lab swap: GPUStack's workers could not be read: %s" % err) from err
        if all(w["state"] != "ready" for w in workers if w["name"] == node):
            took = time.monotonic() - start
            host.say("lab swap: GPUStack marked %s's worker down after %.0f s" % (node, took))
            return took
        time.sleep(interval)
    raise host.LabError("lab swap: GPUStack still shows %s's worker ready %.0f s after it stopped" % (node, timeout))


def run(scenario: Scenario) -> None:
    """The scenario's steps (module docstring); LabError when a step other than a play failed."""
    scenario.prepare()
    # The cards of node-b change. As on a real node, the inventory stays as it is: the node's NVML answers change
    # (the recording the node replays), and so does its CDI spec, as the NVIDIA toolkit's `nvidia-ctk cdi generate`
    # writes it after a swap.
    nodes.gpu_stand_in("node-b", NEW_CARDS)
    # What GPUStack has before, so the suite can prove node-a's replica was not touched.
    snapshot_models(scenario.path("before.json"))
    load = scenario.load().start()
    try:
        scenario.say("node-b now has 2x RTX 4090; rebuild_node.yml --limit node-b")
        scenario.play("rebuild-1", BOOK, "--limit", "node-b")
        scenario.say("rebuild_node.yml --limit node-b again (expected changed=0)")
        scenario.play("rebuild-2", BOOK, "--limit", "node-b")
    finally:
        scenario.say("the route under load while the two rebuilds ran")
        load.stop()

    # A reinstall from scratch loses the worker's identity (GPUStack's worker_uuid in its data directory) and the
    # pairs record: the node must re-join under its name without a ghost worker or an orphaned replica. The node
    # goes down unannounced, as a reinstalled one does; the request loop starts once GPUStack has noticed (until
    # then GPUStack still sends node-b its share and those requests fail: that is the node dying, not the play),
    # and counts what fails while rebuild_node.yml brings it back.
    scenario.record_steps()
    if scenario.steps != "all":
        scenario.say("core steps: the reinstall is left out (`python -m lab scenario hardware_swap` runs it)")
        return
    scenario.say("node-b reinstalled (worker data directory and pairs record wiped); rebuild_node.yml --limit node-b")
    host.node_exec("node-b", "sh", "-c",
                   "systemctl stop gpustack-worker && rm -rf /var/lib/gpustack-worker /var/lib/pairserve/pairs.json")
    wait_worker_down("node-b")
    load = scenario.load("reinstall").start()
    try:
        scenario.play("reinstall", BOOK, "--limit", "node-b")
    finally:
        scenario.say("the route under load while the rebuild of the reinstalled node ran")
        load.stop()
