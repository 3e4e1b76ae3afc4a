"""A/B arms booted through GPUStack on the lab (`python -m lab scenario bench_arms`, molecule/bench_arms's side
effect), judged afterwards from what the runs left under .lab/bench_arms/:

1. playbooks/bench.yml --check: says what it would boot on node-b, drains and registers nothing;
2. playbooks/bench.yml with arm seqs-2 (node-b's replica with --max-num-seqs 2): the baseline and the arm are
   measured, the report compares them on qwen-node-b, node-b is back on its previous registration (rolled out
   again), node-a was not touched, the route has its weights back;
3. the route answered every request of the loop that ran meanwhile (0 failed).
"""

from __future__ import annotations

import json

import pytest

from lab.api import ROUTE, STATE, WEIGHTS
from support.lab_suite import load_summary, rc, results
from support.recap import items, module_args

DIR = STATE / "bench_arms"
NODE_B, NODE_A = f"{ROUTE}-node-b", f"{ROUTE}-node-a"
# What a registration is; the rest (ids, timestamps, state) changes with every write.
SPEC = ("backend", "backend_version", "backend_parameters", "image_name", "local_path", "env", "gpu_selector",
        "replicas", "run_command", "restart_on_error")


def _snap(name):
    return json.loads((DIR / name).read_text())


def drains(run):
    """(host, route, drained models) for every route weight change that drained (gpustack_route with drain), in
    the order the play ran them; skipped items carry no arguments."""
    return [(r["_host"], module_args(i)["name"], module_args(i)["drain"])
            for r in run.where(action="pairserve.llm.gpustack_route", status="ok")
            for i in items(r) if module_args(i).get("drain") and i.get("changed")]


def said(run, task_file):
    """What the bench role's messages of `task_file` said (debug results that ran, whitespace folded)."""
    msgs = [" ".join(str(r.get("msg", "")).split()) for r in
            run.where(action="ansible.builtin.debug", role="bench", task_file=task_file, status="ok")]
    assert msgs, f"{run.source}: no message of the bench role's {task_file}"
    return " | ".join(msgs)


@pytest.fixture(scope="module")
def report():
    runs = sorted((DIR / "reports").glob("*-arms-report/results.json"))
    assert len(runs) == 1, f"expected one bench report of the run, found {runs}"
    return json.loads(runs[0].read_text())


def test_check_mode_says_what_it_would_boot_and_changes_nothing():
    run = results(DIR / "check.log")
    assert rc(DIR / "check.rc") == 0, run.recap()
    # The message is the feature here: check mode tells the user what a run would boot.
    words = said(run, "tasks/node_prepare.yml")
    assert "Check mode: nothing is drained or booted." in words, words
    words = said(run, "tasks/report.yml")
    assert 'seqs-2 (boot on node-b with {"max_num_seqs": 2})' in words, words
    assert drains(run) == [], "check mode drained a node"
    routes = run.where(action="pairserve.llm.gpustack_route")
    assert not any(r.get("changed") for r in routes), "check mode would change a route"
    before, after = _snap("before.json"), _snap("after-check.json")
    for name in (NODE_A, NODE_B):
        assert {k: after["models"][name].get(k) for k in SPEC} == {k: before["models"][name].get(k) for k in SPEC}
        assert after["instances"][name]["id"] == before["instances"][name]["id"], "check mode restarted a replica"
    assert after["weights"] == before["weights"]


def test_the_run_succeeded_and_drained_node_b_only():
    run = results(DIR / "bench.log")
    assert rc(DIR / "bench.rc") == 0, run.recap()
    drained = drains(run)
    assert [(host, models) for host, _route, models in drained] == [("node-b", [NODE_B])], drained
    assert run.recap()["node-b"]["failed"] == 0, run.where(status="failed")


def test_baseline_and_arm_were_measured_and_compared(report):
    measured = {t["name"] for t in report["baseline"]["targets"] if t.get("measurement")}
    assert {NODE_A, NODE_B} <= measured, report["baseline"]["targets"]
    assert [a["name"] for a in report["arms"]] == ["seqs-2"]
    arm = report["arms"][0]
    assert arm["status"] == "measured", arm
    assert arm["kind"] == "node" and arm["node"] == "node-b" and arm["replica"] == {"max_num_seqs": 2}
    assert "--max-num-seqs=2" in arm["argv"], arm["argv"]
    blocks = {b["target"]: b for b in arm["comparison"]}
    assert NODE_B in blocks, arm["comparison"]
    rows = {r["metric"]: r for r in blocks[NODE_B]["rows"]}
    assert "throughput at concurrency N tok/s" in rows and "single-stream decode tok/s" in rows, rows
    for row in rows.values():
        assert row["verdict"] in ("improved", "regressed", "unchanged") and row["baseline"] > 0 and row["candidate"] > 0
    assert report["failed"] == []
    text = next((DIR / "reports").glob("*-arms-report/report.md")).read_text()
    assert "## A/B arms" in text and "| seqs-2 | node node-b via GPUStack | measured |" in text


def test_node_b_is_back_on_its_previous_registration_and_node_a_untouched(report):
    before, after = _snap("before.json"), _snap("after.json")
    assert {k: after["models"][NODE_B].get(k) for k in SPEC} == {k: before["models"][NODE_B].get(k) for k in SPEC}
    assert "--max-num-seqs=8" in after["models"][NODE_B]["backend_parameters"]
    assert after["instances"][NODE_B]["state"] == "running"
    assert after["instances"][NODE_B]["id"] != before["instances"][NODE_B]["id"], "node-b's replica never restarted"
    assert after["instances"][NODE_A]["id"] == before["instances"][NODE_A]["id"], "node-a's replica was restarted"
    assert {k: after["models"][NODE_A].get(k) for k in SPEC} == {k: before["models"][NODE_A].get(k) for k in SPEC}
    restored = report["arms"][0]["restored"]
    assert NODE_B in restored["registration"] and restored["route weights"] == "restored", restored


def test_the_route_has_its_weights_back():
    after = _snap("after.json")
    assert after["weights"] == _snap("before.json")["weights"] == {f"{ROUTE}-{h}": w for h, w in WEIGHTS.items()}


def test_no_request_failed_on_the_route():
    summary = load_summary(DIR)
    assert summary["requests"] > 0
    assert summary["failed"] == 0, json.dumps(summary, indent=1)[:3000]
