"""Partial failures on the lab (`python -m lab scenario faults`, molecule/faults' side effect):

1. site.yml, with node-b's SSH port refusing connections from its checkpoint play on: node-b is unreachable half-way,
   node-a's run goes on, and the route keeps node-b's target and weight, saying so; the fix-up run and the one after
   it pass, the second with changed=0.
2. maintenance.yml --limit node-a while node-b's worker is stopped: refused before anything changes.
3. maintenance.yml --limit node-a, node-b's worker killed as soon as node-a is drained: the maintenance stops before
   node-a's replicas go down and gives node-a its weights back, so the route answers again through node-a; with
   node-b's worker started again the same play finishes, and site.yml afterwards changes nothing.
4. verify.yml and status.yml while node-b's worker is stopped, as while the node restarts (GPUStack still lists its
   worker ready and its instance running): both fail naming node-b's worker first, with the address asked, and
   verify sends no request; with the worker up again verify.yml passes with changed=0.

Judged from the plays' task results (the pairserve_results callback's JSON lines), their exit status and recap, and
GPUStack's state between the steps (.lab/faults/*.json). Every check depends on the side effect having run: a missing
file fails (it never skips).
"""

from __future__ import annotations

import json
import re

from lab.api import ROUTE, STATE
from lab.faults import own
from support.lab_suite import load_summary, rc, recap, results

DIR = STATE / "faults"


def snapshot(name):
    return json.loads((DIR / f"{name}.json").read_text(encoding="utf-8"))


def folded(text):
    return " ".join(str(text).split())


def failures(found, host):
    return [r for r in found.where(host=host, status="failed") if not r.get("_ignored")]


def times():
    lines = (DIR / "times").read_text().splitlines()
    return {k: float(v) for k, v in (line.strip().split("=", 1) for line in lines if "=" in line)}


def passed_then_unchanged(fix, rerun):
    """The user's fix-up run `fix` passed, and `rerun` after it passed on both nodes with changed=0."""
    assert rc(DIR / f"{fix}.rc") == 0, results(DIR / f"{fix}.log").where(status="failed")
    counts = recap(DIR / f"{rerun}.log")
    assert rc(DIR / f"{rerun}.rc") == 0, counts
    assert {"node-a", "node-b"} <= set(counts) and not any(c["changed"] for c in counts.values()), \
        results(DIR / f"{rerun}.log").where(changed=True)


# --- 1. a node cut off half-way through site.yml --------------------------------------------------------------------

def test_node_b_was_cut_off_half_way_and_node_a_finished_the_run():
    assert "cut" in times(), "the cut never happened: site.yml did not reach the checkpoint play"
    counts = recap(DIR / "cut.log")
    assert rc(DIR / "cut.rc") != 0, counts
    assert counts["node-b"]["unreachable"] > 0, counts
    assert counts["node-a"]["failed"] == 0 and counts["node-a"]["unreachable"] == 0, counts
    run = results(DIR / "cut.log")
    # node-b took part in the plays before the cut (its worker is up and registered); the route play ran on node-a.
    assert run.where(host="node-b", role="pairserve.llm.gpustack_worker", status="ok"), "node-b was cut before its worker play"
    assert run.where(host="node-a", role="pairserve.llm.route", action="gpustack_route"), "node-a's route play did not run"


def test_the_route_kept_node_b_target_and_weight_and_said_so():
    before, after = snapshot("before")["routes"][ROUTE], snapshot("after-cut")["routes"][ROUTE]
    kept = own(before, "node-b")
    assert kept and all(w > 0 for w in kept.values()), before
    assert after == before, (before, after)
    debug = results(DIR / "cut.log").where(host="node-a", role="pairserve.llm.route", action="ansible.builtin.debug")
    said = [folded(r.get("msg")) for r in debug]
    for name, weight in kept.items():
        line = f"node-b failed earlier in this run: its route target {name} is kept at {weight}"
        assert any(line in text for text in said), (line, said)


def test_node_b_replica_kept_serving_through_the_cut():
    before, after = snapshot("before")["instances"], snapshot("after-cut")["instances"]
    for name in own(before, "node-b"):
        assert after[name]["id"] == before[name]["id"] and after[name]["state"] == "running", (before[name], after.get(name))


def test_the_fix_up_run_passes_and_the_next_changes_nothing():
    passed_then_unchanged("cut-fixup", "cut-rerun")


# --- 2. a drain that would leave the route nothing ------------------------------------------------------------------

def test_the_drain_was_refused_naming_the_reason():
    run = results(DIR / "refused.log")
    assert rc(DIR / "refused.rc") != 0
    failed = failures(run, "node-a")
    assert len(failed) == 1, [(r["_task"], r.get("_task_path")) for r in failed]
    msg = folded(failed[0].get("msg"))
    assert "node-a serves its routes now and draining it would leave them nothing" in msg, msg
    assert "Nothing was changed" in msg and "pairserve_maintenance_allow_downtime" in msg, msg
    # Nothing was written, drained or stopped before the refusal.
    assert not run.where(host="node-a", changed=True), run.where(changed=True)


def test_nothing_changed_when_the_drain_was_refused():
    before, after = snapshot("before-refused"), snapshot("after-refused")
    assert after["routes"] == before["routes"], (before["routes"], after["routes"])
    for name in own(before["routes"][ROUTE], "node-a"):
        assert after["instances"][name]["id"] == before["instances"][name]["id"], (before["instances"], after["instances"])
    record = {when: (DIR / f"refused-record-{when}").read_text() for when in ("before", "after")}
    assert record["after"] == record["before"], f"the refused run changed node-a's maintenance record: {record}"


# --- 3. the other node's worker lost while this one is drained -----------------------------------------------------

def test_the_maintenance_stopped_when_the_other_worker_died():
    when = times()
    assert "killed" in when and when["killed"] < when["lost_done"], when
    run = results(DIR / "lost.log")
    assert rc(DIR / "lost.rc") != 0
    failed = failures(run, "node-a")
    assert failed, "maintenance.yml ended without a failure although the route lost its other target"
    msg = folded(failed[-1].get("msg"))
    # Caught before node-a's replicas went down: node-b's worker, asked again right before that step, refused.
    assert "While node-a was drained, the other targets stopped answering before its replicas went down" in msg, msg
    assert "[node-b] the worker at" in msg and "its route weights were given back" in msg, msg


def test_node_a_kept_its_replica_and_got_its_weights_back():
    run = results(DIR / "lost.log")
    assert not run.where(host="node-a", action="gpustack_remove"), "node-a's replicas were stopped"
    assert not run.where(host="node-a", task="Put the worker in GPUStack's maintenance mode"), \
        "node-a's worker went into maintenance mode although the route had lost its other target"
    before, after = snapshot("after-refused"), snapshot("after-lost")
    for name in own(before["routes"][ROUTE], "node-a"):
        assert after["instances"][name]["id"] == before["instances"][name]["id"], (before["instances"], after["instances"])
    mine = own(after["routes"][ROUTE], "node-a")
    assert mine and all(w > 0 for w in mine.values()), after["routes"]


def test_the_route_gap_was_measured_and_ended_with_node_a_back():
    load = load_summary(DIR)
    # The loop saw the route answer nothing once node-b's worker was gone and node-a drained, then answer again
    # (node-a, given its weight back) before it stopped.
    outage = load["longest_outage"]
    assert load["failed"] > 0 and outage and outage["to"] is not None, load
    assert outage["to"] <= times()["lost_done"], (outage, times())
    run = results(DIR / "lost.log")
    debug = run.where(host="node-a", task_file="tasks/watch_report.yml", action="ansible.builtin.debug")
    reports = [folded(r.get("msg")) for r in debug]
    gaps = [float(m.group(1)) for m in (re.search(r"had no target that answered for ([0-9.]+) s", t) for t in reports) if m]
    assert gaps and gaps[-1] > 0, reports


def test_the_maintenance_finished_once_node_b_was_back_and_site_changes_nothing():
    passed_then_unchanged("finish", "rerun")
    assert snapshot("after")["routes"] == snapshot("before")["routes"]


# --- 4. a node restarting while verify and status run ---------------------------------------------------------------

def first_failure(name, host="node-a"):  # the GPUStack server host runs both plays
    run = results(DIR / f"{name}.log")
    assert rc(DIR / f"{name}.rc") != 0, f"{name}: passed although node-b's worker was stopped"
    failed = failures(run, host)
    assert failed, [(r.get("_host"), r["_task"]) for r in run.where(status="failed")]
    return run, failed[-1]


def test_verify_named_node_b_first_and_sent_no_request():
    run, failed = first_failure("verify-down")
    text = str(failed.get("msg"))
    # Either the step before the requests found node-b's worker silent while GPUStack still listed its replica as
    # running, or GPUStack had already marked node-b unreachable (its worker syncer asks every 15 s) and the wait
    # for the replicas ended (the scenario gives it 30 s): node-b first either way.
    assert text.startswith("[node-b] "), text
    if failed["_task"] == "Fail naming the nodes whose replicas GPUStack cannot reach":
        lines = text.splitlines()
        assert re.match(r"\[node-b\] the worker at http://\S+ does not answer \(", lines[0]), lines
        assert "No request was sent: GPUStack cannot reach every replica of %s" % ROUTE in text, lines
    else:
        assert failed["_task"] == "Fail with the states of the instances that are not running", failed["_task"]
        assert re.match(r"\[node-b\] instance \S+ \(\S+\) is (?!running)", folded(text)), text
    assert not any(line.startswith("[node-a]") for line in text.splitlines()), text
    assert not run.where(action="pairserve.llm.llm_verify"), "verify sent its requests although node-b was down"


def test_status_named_node_b_worker_first_and_did_not_call_its_replica_running():
    run, failed = first_failure("status-down")
    problems = str(failed.get("msg")).split("\n- ")
    assert problems[0] == "Down:", problems
    assert problems[1].startswith("[node-b] the worker at http://") and "does not answer" in problems[1], problems
    table = [folded(r.get("msg")) for r in run.where(task="Show the status")]
    assert table, "status.yml showed no table"
    # GPUStack's own state beside it: ready and running until its syncer marks them unreachable.
    assert len(re.findall(r"unreachable \(GPUStack: \w+\)", table[0])) >= 2, table[0]


def test_verify_passes_once_node_b_is_back_and_changes_nothing():
    counts = recap(DIR / "verify-back.log")
    assert rc(DIR / "verify-back.rc") == 0, results(DIR / "verify-back.log").where(status="failed")
    assert counts and not any(c["changed"] for c in counts.values()), counts
