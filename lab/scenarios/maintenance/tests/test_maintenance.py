"""A node taken down for maintenance, on the lab (`python -m lab scenario maintenance`, molecule/maintenance's side
effect): playbooks/maintenance.yml --limit node-b with the default action, reboot (the lab's reboot: node-b's
container restarted), under the request loop; then the same play in check mode and site.yml. Judged from the plays' task
results (the pairserve_results callback's JSON lines), the request loop's summary and GPUStack's state before,
after the maintenance and after the check run.

Every check depends on the side effect having run: a missing file fails (it never skips).
"""

from __future__ import annotations

import json
import re

import pytest

from lab.api import STATE
from support.lab_suite import load_summary, rc, results

DIR = STATE / "maintenance"


@pytest.fixture(scope="module")
def run():
    found = results(DIR / "maintenance.log")
    assert rc(DIR / "maintenance.rc") == 0, (found.recap(), found.where(status="failed"))
    return found


def snapshot(name):
    return json.loads((DIR / f"{name}.json").read_text())


def _module(record):
    return str(record.get("_action") or "").rsplit(".", 1)[-1]


def test_node_b_was_drained_held_stopped_rebooted_checked_verified_and_restored_in_that_order(run):
    steps = []
    for record in run.where(host="node-b"):
        module, args = _module(record), (record.get("invocation") or {}).get("module_args") or {}
        if record.get("_status") != "ok":
            continue
        if module == "gpustack_route" and record.get("changed"):
            items = record.get("results") or [record]
            kind = "drain" if any((i.get("invocation") or {}).get("module_args", {}).get("drain") for i in items) \
                or str(record.get("_task", "")).endswith("to drain") else "restore"
            steps.append(kind)
        elif module == "gpustack_worker_maintenance" and record.get("changed"):
            steps.append("maintenance on" if args.get("enabled") else "maintenance off")
        elif module == "gpustack_remove" and record.get("changed"):
            steps.append("stop")
        elif module == "reboot" and record.get("rebooted"):
            steps.append("reboot")
        elif module == "gpu_pairs":
            steps.append("detect")
        elif module == "llm_verify":
            steps.append("verify")
    ran = [s for i, s in enumerate(steps) if i == 0 or s != steps[i - 1]]
    assert ran == ["detect", "drain", "maintenance on", "stop", "reboot", "detect", "maintenance off", "verify",
                   "restore"], steps


def test_the_reboot_restarted_node_b_and_its_replica():
    before, after = snapshot("before"), snapshot("after")
    assert after["node_b_started"] != before["node_b_started"], "node-b's container was not restarted"
    b = [name for name in before["instances"] if name.endswith("node-b")]
    assert b, before
    for name in b:
        assert after["instances"][name]["id"] != before["instances"][name], (name, before, after)
        assert after["instances"][name]["state"] == "running", after["instances"][name]
    for name in set(before["instances"]) - set(b):
        assert after["instances"][name]["id"] == before["instances"][name]["id"], f"{name} was touched"


def test_the_cards_and_the_worker_identity_were_checked_again(run):
    detected = run.where(host="node-b", action="gpu_pairs", status="ok")
    assert len(detected) == 2, detected  # before the drain and after the reboot
    assert detected[0]["ansible_facts"]["pairserve_gpu"]["gpus"] == detected[1]["ansible_facts"]["pairserve_gpu"]["gpus"]
    identity = run.where(host="node-b", role="pairserve.llm.gpustack_worker", task_file="tasks/identity.yml",
                         action="ansible.builtin.assert", status="ok")
    assert identity, "the worker's GPU identity was not checked after the reboot"


def test_node_b_is_back_at_its_weight_ready_and_out_of_maintenance_mode():
    before, after = snapshot("before"), snapshot("after")
    node_b = [w for name, w in after["weights"].items() if name.endswith("node-b")]
    assert after["weights"] == before["weights"] and node_b and all(w > 0 for w in node_b), (before, after)
    worker = after["workers"]["node-b"]
    assert worker["state"] == "ready" and not (worker.get("maintenance") or {}).get("enabled"), worker


def test_the_time_out_of_the_route_was_printed(run):
    texts = [" ".join(str(r.get("msg")).split()) for r in run.where(host="node-b", action="ansible.builtin.debug")]
    found = [re.search(r"node-b was out of route\(s\) qwen for ([0-9.]+) s", t) for t in texts]
    found = [m for m in found if m]
    assert len(found) == 1, texts[-5:]
    assert float(found[0].group(1)) > 0


def test_the_route_answered_every_request_during_the_maintenance():
    load = load_summary(DIR)
    assert load["failed"] == 0, load
    assert load["ok"] >= 20, f"too few requests to prove anything: {load}"


def test_check_mode_changes_nothing_and_says_what_it_would_do():
    check = results(DIR / "check.log")
    assert rc(DIR / "check.rc") == 0, check.where(status="failed")
    assert not any(counts["changed"] for counts in check.recap().values()), check.where(changed=True)
    assert not check.where(action="gpustack_route", changed=True)
    texts = [" ".join(str(r.get("msg")).split()) for r in check.where(host="node-b", action="ansible.builtin.debug")]
    assert any(t.startswith("node-b: would drain") for t in texts), texts
    assert snapshot("after-check")["weights"] == snapshot("after")["weights"]


def test_site_yml_afterwards_changes_nothing():
    rerun = results(DIR / "rerun.log")
    assert rc(DIR / "rerun.rc") == 0, rerun.where(status="failed")
    changed = {host: counts["changed"] for host, counts in rerun.recap().items()}
    assert {"node-a", "node-b"} <= set(changed) and not any(changed.values()), rerun.where(changed=True)
