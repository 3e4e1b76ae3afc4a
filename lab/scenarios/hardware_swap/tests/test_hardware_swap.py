"""The hardware-swap scenario on the lab (`python -m lab scenario hardware_swap`, molecule/hardware_swap's side
effect), judged afterwards: node-b's cards became 2x RTX 4090 (24 GiB) and `rebuild_node.yml --limit node-b` ran
twice.

- GPUStack's worker node-b shows the new cards; the replica qwen-node-b runs on them, started after the swap;
- the pairs record on node-b holds the new UUIDs;
- node-a's replica was not touched (same instance, same registration), the route has both targets with their
  weights back, and no request of the loop that ran meanwhile failed;
- the second run changed nothing;
- after node-b's worker identity and pairs record were wiped (a reinstall), a third run re-joined it under its
  name: one worker node-b (a new record), no ghost, its replica running on it, nothing left on the old record.
"""

from __future__ import annotations

import json

import pytest
import testinfra

from lab.api import REPO, ROUTE, STATE, WEIGHTS, items, read_keys, route_weights
from support.lab_suite import load_summary, rc, results, skip_unless_all_steps
from support.recap import module_args

DIR = STATE / "hardware_swap"
NEW = json.loads((REPO / "tests" / "fixtures" / "nvml" / "node-b-2x4090.json").read_text())["devices"]


@pytest.fixture(scope="module")
def keys():
    return read_keys()


def rebuild_decision(run, host="node-b"):
    """The rebuild's decision (the fact pairserve_rebuild, from the filter rebuild_compare): the last one set."""
    decisions = run.facts(host, "pairserve_rebuild")
    assert decisions, f"{run.source}: no pairserve_rebuild fact for {host}: the rebuild never compared the cards"
    return decisions[-1]


def test_the_rebuild_found_the_new_cards_and_succeeded():
    run = results(DIR / "rebuild-1.log")
    assert rc(DIR / "rebuild-1.rc") == 0, run.recap()
    assert run.hosts() == {"node-b"}, "the rebuild ran on another host than node-b"
    decision = rebuild_decision(run)
    assert decision["cards_changed"] is True and decision["work"] is True, decision
    assert [g[1] for g in decision["detected_gpus"]] == [d["Name"] for d in NEW], decision["detected_gpus"]
    # The worker was restarted to see the new cards (the rebuild role's handler, systemd on the lab's nodes).
    restarts = [module_args(r)
                for r in run.where(host="node-b", action="ansible.builtin.systemd_service", role="rebuild",
                                   changed=True)]
    assert [(a.get("name"), a.get("state")) for a in restarts] == [("gpustack-worker", "restarted")], restarts
    # The other node's replica was not touched: the role's own before/after views of the other replicas.
    before = run.facts("node-b", "pairserve_maintenance_view")[0]["others"]
    after = run.facts("node-b", "pairserve_rebuild_after")
    assert set(before) == {f"{ROUTE}-node-a"}, before
    assert after and after[-1]["others"] == before, (before, after)


def test_gpustack_shows_the_new_cards_on_node_b(keys):
    workers = {w["name"]: w for w in items("/v2/workers", keys["management"])}
    assert list(n for n in workers if n == "node-b") == ["node-b"], sorted(workers)
    assert workers["node-b"]["state"] == "ready", workers["node-b"]
    gpus = sorted((g["index"], g["name"], g["memory"]["total"]) for g in items("/v2/gpu-devices", keys["management"])
                  if g["worker_name"] == "node-b")
    assert gpus == [(i, d["Name"], d["MemoryInfo"]["total"]) for i, d in enumerate(NEW)], gpus


def test_node_b_replica_runs_on_the_new_pair_and_the_record_has_their_uuids(keys):
    models = {m["name"]: m for m in items("/v2/models", keys["management"])}
    assert models[f"{ROUTE}-node-b"]["gpu_selector"]["gpu_ids"] == ["node-b:cuda:0", "node-b:cuda:1"]
    running = {i["model_name"]: i for i in items("/v2/model-instances", keys["management"])}
    inst = running[f"{ROUTE}-node-b"]
    assert inst["state"] == "running" and inst["worker_name"] == "node-b", inst
    node_b = testinfra.get_host("podman://pairserve-lab-node-b")
    record = json.loads(node_b.file("/var/lib/pairserve/pairs.json").content_string)
    assert sorted(u for p in record["pairs"] for u in p["uuids"]) == sorted(d["UUID"] for d in NEW), record
    assert {p["name"] for p in record["pairs"]} == {"NVIDIA GeForce RTX 4090"}


def test_node_a_untouched_and_route_intact(keys):
    before = json.loads((DIR / "before.json").read_text())
    after = {i["model_name"]: i for i in items("/v2/model-instances", keys["management"])}
    mine = before["instances"][f"{ROUTE}-node-a"]
    assert after[f"{ROUTE}-node-a"]["id"] == mine["id"], "node-a's instance was replaced"
    assert after[f"{ROUTE}-node-a"]["state"] == "running"
    models = {m["name"]: m for m in items("/v2/models", keys["management"])}
    assert models[f"{ROUTE}-node-a"]["updated_at"] == before["models"][f"{ROUTE}-node-a"]["updated_at"]
    # node-b's replica did restart (new instance) on the new cards.
    assert after[f"{ROUTE}-node-b"]["id"] != before["instances"][f"{ROUTE}-node-b"]["id"]
    assert route_weights(keys["management"]) == {f"{ROUTE}-{h}": w for h, w in WEIGHTS.items()}


def test_a_second_rebuild_changes_nothing():
    run = results(DIR / "rebuild-2.log")
    assert rc(DIR / "rebuild-2.rc") == 0, run.recap()
    assert run.recap()["node-b"]["changed"] == 0, run.where(changed=True)
    assert rebuild_decision(run)["work"] is False, rebuild_decision(run)
    assert not run.where(action="ansible.builtin.systemd_service"), "the worker was restarted again"


@pytest.mark.parametrize("phase", ["", "reinstall"])
def test_no_request_failed_during_the_rebuilds(phase):
    """The loop ran through the two rebuilds after the swap, and again through the rebuild of the reinstalled
    node (started once GPUStack had marked the dead worker down)."""
    if phase:
        skip_unless_all_steps(DIR, "the rebuild of a reinstalled node")
    load = load_summary(DIR / phase)
    assert load["requests"] >= 20, load
    assert load["failed"] == 0, json.dumps(load, indent=1)


def test_a_reinstalled_node_rejoins_without_a_ghost_worker(keys):
    skip_unless_all_steps(DIR, "the rebuild of a reinstalled node")
    run = results(DIR / "reinstall.log")
    assert rc(DIR / "reinstall.rc") == 0, run.recap()
    before = json.loads((DIR / "before.json").read_text())
    old_worker = before["instances"][f"{ROUTE}-node-b"]["worker_id"]
    stale = rebuild_decision(run)["stale_workers"]
    assert [w["id"] for w in stale] == [old_worker], stale
    # ... and the rebuild removed that record (the role's gpustack_remove of the worker, changed).
    removals = [r for r in run.where(host="node-b", action="pairserve.llm.gpustack_remove", role="rebuild")
                if module_args(r).get("kind") == "worker"]
    assert [w["id"] for r in removals for w in r.get("removed", [])] == [old_worker], removals
    # The management key never shows in a task's arguments (the module's api_key is no_log).
    assert keys["management"] not in (DIR / "reinstall.jsonl").read_text()
    workers = [w for w in items("/v2/workers", keys["management"]) if w["name"] == "node-b"]
    assert len(workers) == 1 and workers[0]["state"] == "ready", workers
    assert workers[0]["id"] != old_worker, "the worker record was not replaced"
    instances = [i for i in items("/v2/model-instances", keys["management"]) if i["model_name"] == f"{ROUTE}-node-b"]
    assert [(i["worker_id"], i["state"]) for i in instances] == [(workers[0]["id"], "running")], instances
    node_b = testinfra.get_host("podman://pairserve-lab-node-b")
    assert node_b.file("/var/lib/gpustack-worker/worker_uuid").exists
    assert node_b.file("/var/lib/pairserve/pairs.json").exists
