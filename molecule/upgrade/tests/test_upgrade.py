"""The upgrade scenario on the lab (scripts/lab.sh upgrade, molecule/upgrade's side effect), judged afterwards:

1. playbooks/upgrade.yml with a vLLM pin that has no runner image: the play fails before any drain, names the
   pin, and GPUStack is as it was;
2. a runner image that exists but cannot serve: node-a is drained, its replica rolled out on it, verification
   fails, the previous registration and the weights are put back and the play stops, naming what failed;
3. the checkpoint revision pin moved to the lab hub's next commit: each replica drained, re-registered on the new
   snapshot, rolled out, verified and given its weight back, one node at a time;
4. the same pins again: changed=0;
5. the route answered every request of the loop that ran meanwhile (the goal: 0 failed).
"""

from __future__ import annotations

import json
import re

import pytest

from support.lab_api import (REPO, ROUTE, STATE, WEIGHTS, items, load_summary, rc, read_keys, recap, route_weights,
                             skip_unless_all_steps)

DIR = STATE / "upgrade"
HUB = json.loads((STATE / "hub.json").read_text()) if (STATE / "hub.json").exists() else {}


@pytest.fixture(scope="module")
def keys():
    return read_keys()


def test_the_bad_pin_is_refused_before_anything_changes():
    log = (DIR / "bad-pin.log").read_text()
    assert rc(DIR / "bad-pin.rc") != 0, "upgrade.yml accepted a vLLM pin that has no runner image"
    assert "fatal: [node-a]: FAILED!" in log, log[-3000:]
    before, failure = log.split("fatal: [node-a]: FAILED!", 1)
    failure = failure.split("PLAY RECAP", 1)[0]
    assert "Upgrade of node-a failed at" in failure and "runner image" in failure, failure
    assert "localhost/pairserve-vllm-cpu:0.99.0" in failure, failure
    assert "no replica had changed yet" in failure and "route weights untouched" in failure, failure
    # The refusal came before the drain: no weight was touched and node-b never started.
    assert "TASK [Drain this node from its routes]" not in before
    assert "node-b" not in recap(DIR / "bad-pin.log"), "the play went on to node-b after node-a failed"
    assert recap(DIR / "bad-pin.log")["node-a"]["changed"] == 0


def test_a_replica_that_fails_verification_is_rolled_back():
    skip_unless_all_steps(DIR, "the rollback of a runner image that cannot serve")
    log = (DIR / "broken-image.log").read_text()
    assert rc(DIR / "broken-image.rc") != 0, "upgrade.yml accepted a runner image that cannot serve"
    before, failure = log.split("fatal: [node-a]: FAILED!", 1)
    failure = failure.split("PLAY RECAP", 1)[0]
    # It got as far as the drain and the rollout, and failed in verification.
    assert "TASK [Drain this node from its routes]" in before
    assert "Upgrade of node-a failed at" in failure, failure
    assert "Rolled back: qwen-node-a" in failure and "route weights restored" in failure, failure
    assert "node-b" not in recap(DIR / "broken-image.log"), "the play went on to node-b after node-a failed"
    assert "TASK [Put this node's previous replica registrations back]" in log


def test_the_revision_pin_rolled_out_one_node_at_a_time(keys):
    log = (DIR / "upgrade-1.log").read_text()
    assert rc(DIR / "upgrade-1.rc") == 0, log[-4000:]
    assert HUB.get("next_revision"), "the lab hub has no next commit (scripts/lab_hub.py)"
    assert HUB["next_revision"] != HUB["revision"]
    models = {m["name"]: m for m in items("/v2/models", keys["management"])}
    for host in ("node-a", "node-b"):
        # The rollback of step 2 left the working image in place.
        assert models[f"{ROUTE}-{host}"]["image_name"] == "localhost/pairserve-vllm-cpu:0.27.1"
        assert models[f"{ROUTE}-{host}"]["local_path"].endswith("/" + HUB["next_revision"]), \
            models[f"{ROUTE}-{host}"]["local_path"]
    # One node at a time: node-a drained, verified and restored before node-b was drained.
    drains = [m.start() for m in re.finditer(r"TASK \[Drain this node from its routes\]", log)]
    hosts = re.findall(r"TASK \[Drain this node from its routes\] \**\nincluded: \S+ for (node-[ab])", log)
    assert len(drains) == 2, f"expected one drain per node, found {len(drains)}"
    assert hosts[:2] == ["node-a", "node-b"], hosts
    restores = [m.start() for m in re.finditer(r"TASK \[Give this node its route weights back\]", log)]
    assert len(restores) == 2 and drains[0] < restores[0] < drains[1] < restores[1], (drains, restores)
    assert recap(DIR / "upgrade-1.log")["node-a"]["failed"] == 0


def test_every_replica_runs_the_new_snapshot_with_its_weight_back(keys):
    running = {i["model_name"]: i for i in items("/v2/model-instances", keys["management"])}
    for host in ("node-a", "node-b"):
        inst = running.get(f"{ROUTE}-{host}")
        assert inst and inst["state"] == "running", inst
    assert route_weights(keys["management"]) == {f"{ROUTE}-{h}": w for h, w in WEIGHTS.items()}


def test_a_second_run_changes_nothing():
    log = (DIR / "upgrade-2.log").read_text()
    assert rc(DIR / "upgrade-2.rc") == 0, log[-4000:]
    assert {h: r["changed"] for h, r in recap(DIR / "upgrade-2.log").items()} == \
        {h: 0 for h in recap(DIR / "upgrade-2.log")}, log[-4000:]
    assert "Nothing to do." in log


def test_no_request_failed_while_the_upgrade_ran():
    load = load_summary(DIR)
    # The loop ran through the three plays: minutes of requests, not a handful.
    assert load["requests"] >= 50, load
    assert load["failed"] == 0, json.dumps(load, indent=1)


def test_the_lab_pins_file_holds_the_new_revision():
    pins = (REPO / "inventory" / "lab" / "group_vars" / "all" / "lab_hub.yml").read_text()
    assert HUB["next_revision"] in pins
