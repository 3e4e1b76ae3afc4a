"""The drained restart after a tokenizer patch, on the lab (`python -m lab scenario patch_restart`,
molecule/patch_restart's side effect): judged from the converge's task results (the pairserve_results callback's JSON
lines), the request loop's summary, GPUStack's instances before and after, and the nodes themselves.

Every check depends on the side effect having run: a missing file fails (it never skips).
"""

from __future__ import annotations

import json

import pytest
import testinfra

from lab.api import NODE_A, STATE
from support.lab_suite import load_summary, rc, results

DIR = STATE / "patch_restart"
NODES = ("node-a", "node-b")
CONTAINERS = {"node-a": NODE_A, "node-b": NODE_A.replace("node-a", "node-b")}


@pytest.fixture(scope="module")
def records():
    run = results(DIR / "converge.log")
    assert rc(DIR / "converge.rc") == 0, (run.recap(), run.where(status="failed"))
    return run.records


def module_records(records, module):
    """The records of the tasks that ran ``module`` (pairserve.llm.<module>)."""
    return [r for r in records if _module(r) == module]


def _module(record):
    return str(record.get("_action") or "").rsplit(".", 1)[-1]


def checkpoint_fact(records, host):
    facts = [r["ansible_facts"]["pairserve_checkpoint"] for r in records
             if r["_host"] == host and "pairserve_checkpoint" in (r.get("ansible_facts") or {})]
    assert facts, f"no pairserve_checkpoint fact recorded for {host}"
    return facts[-1]


def test_the_patch_was_undone_on_both_nodes_first():
    # The ad-hoc `ansible -m pairserve.llm.tokenizer_patch` run's results (unpatch.jsonl).
    run = results(DIR / "unpatch.log")
    assert rc(DIR / "unpatch.rc") == 0, run.records
    restored = {r["_host"] for r in run.where(action="pairserve.llm.tokenizer_patch", status="ok", changed=True)}
    assert restored == set(NODES), f"the patch was not undone on {set(NODES) - restored}: the test is vacuous"


def test_site_patched_each_node_again_and_marked_its_replicas_for_a_restart(records):
    patched = {r["_host"] for r in module_records(records, "tokenizer_patch") if r.get("changed")}
    assert patched == set(NODES), patched
    for node in NODES:
        assert checkpoint_fact(records, node)["restart_pending"] in (True, "True"), checkpoint_fact(records, node)


def test_each_node_was_drained_restarted_verified_and_restored_before_the_next(records):
    steps = []  # (host, what) in the order the converge ran them
    for record in records:
        module, host = _module(record), record["_host"]
        items = record.get("results") or [record]
        if module == "gpustack_route" and record["_task"].startswith("Set this node's route weights"):
            assert record.get("changed"), record
            steps.append((host, "weights"))
        elif module == "gpustack_model" and any(r.get("restarted") for r in items):
            assert all(r.get("rolled_out") for r in items if r.get("restarted")), record
            steps.append((host, "restart"))
        elif module == "llm_verify":
            steps.append((host, "verify"))
    # The site's own verify play runs after the restarts: only what ran up to the last weight change counts.
    weights = [i for i, step in enumerate(steps) if step[1] == "weights"]
    assert weights, steps
    ran = [s for i, s in enumerate(steps[:weights[-1] + 1]) if i == 0 or s != steps[i - 1]]
    # Per node: drained, restarted, verified, given its weights back; node-a done before node-b starts.
    assert ran == [(node, what) for node in NODES for what in ("weights", "restart", "verify", "weights")], steps


def test_the_route_answered_every_request_during_the_restarts():
    load = load_summary(DIR)
    assert load["failed"] == 0, load
    assert load["ok"] >= 20, f"too few requests to prove anything: {load}"


def test_gpustack_runs_a_new_instance_of_every_replica():
    before = json.loads((DIR / "instances-before.json").read_text())
    after = json.loads((DIR / "instances-after.json").read_text())
    assert set(before) == set(after) and before, (before, after)
    for model, inst in after.items():
        assert inst["state"] == "running", (model, inst)
        assert inst["id"] != before[model], f"{model} was not restarted (instance {inst['id']} before and after)"


def test_the_marks_are_gone_and_the_tokenizer_is_patched_again(records):
    for node in NODES:
        fact = checkpoint_fact(records, node)
        host = testinfra.get_host(f"podman://{CONTAINERS[node]}")
        assert not host.file(fact["restart_marker"]).exists, f"{node}: {fact['restart_marker']} is still there"
        tokenizer = json.loads(host.file(fact["snapshot_path"] + "/tokenizer.json").content_string)
        assert tokenizer["truncation"] is None, f"{node}: the snapshot's tokenizer truncates again"


def test_a_second_run_restarts_nothing():
    run = results(DIR / "rerun.log")
    assert rc(DIR / "rerun.rc") == 0, run.where(status="failed")
    changed = {host: counts["changed"] for host, counts in run.recap().items()}
    assert set(NODES) <= set(changed) and not any(changed.values()), run.where(changed=True)
