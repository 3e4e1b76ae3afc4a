"""Node A lost and restored from a backup, on the lab (`python -m lab scenario restore`, molecule/restore's side
effect), as docs/how-to/backup-restore.md's "Runbook: node A is lost" goes: backup.yml with the archive fetched to
the controller; node-a (the GPUStack server and a GPU node) destroyed with its disk and recreated bare; restore.yml,
rebuild_node.yml --limit node-a, verify.yml and site.yml, under a request loop that keeps the old inference key; then
site.yml and restore.yml again. Judged from the plays' task results (the pairserve_results callback's JSON lines),
their exit status, the request loop's summary, the drill's times and figures, and GPUStack's state before the loss,
after the restore and at the end.

Every check depends on the side effect having run: a missing file fails (it never skips).
"""

from __future__ import annotations

import json
import re
import stat
import subprocess

import pytest

from lab.api import NODE_A, ROUTE, STATE, call
from support.lab_suite import load_summary, rc, results

DIR = STATE / "restore"


def snapshot(name):
    return json.loads((DIR / f"{name}.json").read_text(encoding="utf-8"))


def texts(found, host, task_file=None):
    """The messages of a run's debug tasks on `host`, whitespace folded (the plays fold them over lines)."""
    return [" ".join(str(r.get("msg")).split())
            for r in found.where(host=host, action="ansible.builtin.debug", task_file=task_file)]


def archives():
    found = sorted((DIR / "backups" / "node-a").glob("*.tar.gz"))
    assert found, f"no archive fetched to {DIR / 'backups' / 'node-a'}"
    return found


@pytest.fixture(scope="module")
def restore_run():
    return results(DIR / "restore.log")


def test_the_backup_was_taken_and_fetched_root_only():
    backup = results(DIR / "backup.log")
    assert rc(DIR / "backup.rc") == 0, backup.where(status="failed")
    found = archives()
    for archive in found:
        assert stat.S_IMODE(archive.stat().st_mode) == 0o600, f"{archive} is {oct(archive.stat().st_mode)}"
    assert stat.S_IMODE(found[0].parent.stat().st_mode) == 0o700, oct(found[0].parent.stat().st_mode)


def test_the_restore_used_the_fetched_archive_and_the_server_accepted_the_old_key(restore_run):
    said = texts(restore_run, "node-a", "tasks/restore.yml")
    name = archives()[-1].name
    restored = [t for t in said if t.startswith("Restored " + name)]
    assert len(restored) == 1, said
    assert re.search(r"the server answered [0-9.]+ s after the restore began, and accepts the old inference key",
                     restored[0]), restored[0]


def test_the_restore_failed_for_node_a_alone_naming_rebuild_node(restore_run):
    assert rc(DIR / "restore.rc") != 0, "restore.yml passed although node-a's worker cannot be there yet"
    failed = [r for r in restore_run.where(status="failed") if not r.get("_ignored")]
    assert failed and {r["_host"] for r in failed} == {"node-a"}, [(r["_host"], r["_task"]) for r in failed]
    # Only the wait for the workers failed: the server's restore and start on node-a passed.
    assert all(str(r.get("_task_path") or "").rsplit(":", 1)[0].endswith("tasks/workers.yml") for r in failed), \
        [(r["_task"], r.get("_task_path")) for r in failed]
    msg = " ".join(str(failed[-1].get("msg")).split())
    assert "worker node-a is not installed on the node" in msg and "rebuild_node.yml --limit node-a" in msg, msg
    assert f"Its replicas were taken out of route(s) {ROUTE} (weight 0)" in msg, msg
    node_b = restore_run.where(host="node-b", task_file="tasks/workers.yml", action="gpustack_info", status="ok")
    assert node_b and any(w.get("state") == "ready" for w in node_b[-1].get("workers") or []), node_b
    assert restore_run.recap()["node-b"]["failed"] == 0, restore_run.where(host="node-b", status="failed")


def test_the_restore_drained_node_a_and_no_request_failed_after_it():
    # The restored database says node-a's replica runs, and GPUStack keeps sending its share to it until it is out of
    # the route: restore.yml drains it before it stops, so from its end on every request is served (node-b, then
    # node-a again once rebuild_node.yml gives its weight back).
    restored, times, load = snapshot("after-restore"), snapshot("figures")["times"], load_summary(DIR)
    targets = restored["routes"][ROUTE]
    assert targets and all(w == 0 for name, w in targets.items() if name.endswith("node-a")), targets
    assert any(w > 0 for name, w in targets.items() if name.endswith("node-b")), targets
    assert load["last_failure_at"] is not None and load["last_failure_at"] <= times["restored"], (load, times)


def test_rebuild_verify_and_site_passed():
    for name in ("rebuild", "verify", "site"):
        found = results(DIR / f"{name}.log")
        assert rc(DIR / f"{name}.rc") == 0, (name, found.where(status="failed"))


def test_the_route_came_back_with_the_old_key():
    load = load_summary(DIR)
    times = snapshot("figures")["times"]
    outage = load["longest_outage"]
    assert outage and outage["to"] is not None, f"the route did not answer again before the loop stopped: {load}"
    assert outage["from"] <= times["destroyed"] + 5 < outage["to"], (outage, times)
    assert outage["failed"] > 0, outage
    # The loop sent the key it started with throughout: never refused, and answered again after the outage.
    assert not {"http_401", "http_403"} & set(load["failures_by_class"]), load["failures_by_class"]
    assert load["ok_after_longest_outage"] >= 20, f"too few answers after the recovery to prove anything: {load}"


def test_the_restored_server_holds_the_old_inference_key():
    key_file = DIR / "old-inference-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600, oct(key_file.stat().st_mode)
    old = key_file.read_text().strip()
    now = subprocess.run(["podman", "exec", NODE_A, "cat", "/etc/pairserve/secrets/inference-api-key"],
                         check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    assert old and now == old, "the restored node-a keeps another inference key than the one the clients hold"
    status, body = call("/v1/models", old)
    assert status == 200, (status, body)


def test_gpustack_holds_the_same_routes_models_keys_and_workers_by_name():
    before, after = snapshot("before"), snapshot("after")
    assert ROUTE in before["routes"] and len(before["routes"][ROUTE]) >= 2, before["routes"]
    assert after["routes"] == before["routes"], (before["routes"], after["routes"])
    assert after["models"] == before["models"], (before["models"], after["models"])
    assert after["api_keys"] == before["api_keys"], (before["api_keys"], after["api_keys"])
    assert set(after["workers"]) == set(before["workers"]) == {"node-a", "node-b"}, (before["workers"], after["workers"])
    assert all(w["state"] == "ready" for w in after["workers"].values()), after["workers"]


def test_node_b_kept_its_replica_instance_and_node_a_runs_one_again():
    # The archive was taken right before the loss, so the restore keeps node-b's instance: its worker served
    # through the outage and re-attached (docs/how-to/backup-restore.md, "The running replicas across a restore").
    before, restored, after = snapshot("before"), snapshot("after-restore"), snapshot("after")
    node_b = [name for name in before["instances"] if name.endswith("node-b")]
    node_a = [name for name in before["instances"] if name.endswith("node-a")]
    assert node_b and node_a, before["instances"]
    for name in node_b:
        for when, snap in (("after the restore", restored), ("at the end", after)):
            assert snap["instances"].get(name, {}).get("id") == before["instances"][name]["id"], \
                f"{name}'s instance changed {when}: {before['instances'][name]} -> {snap['instances'].get(name)}"
        assert after["instances"][name]["state"] == "running", after["instances"][name]
    for name in node_a:
        assert after["instances"].get(name, {}).get("state") == "running", after["instances"].get(name)


def test_the_recovery_time_was_printed_and_recorded():
    figures, load = snapshot("figures"), load_summary(DIR)
    recovery = figures["recovery_s"]
    assert recovery is not None and recovery > 0, figures
    assert recovery == round(load["longest_outage"]["to"] - figures["times"]["destroyed"], 1), (figures, load)
    for name in ("node_bare_s", "restore_done_s", "node_a_replica_back_s", "total_s"):
        assert figures[name] is not None and figures[name] > 0, (name, figures)
    printed = (DIR / "figures.txt").read_text()
    assert re.search(r"recovery time \(the route answered nothing\): %s s" % re.escape(str(recovery)), printed), printed


def test_site_yml_afterwards_changes_nothing():
    rerun = results(DIR / "rerun-site.log")
    assert rc(DIR / "rerun-site.rc") == 0, rerun.where(status="failed")
    changed = {host: counts["changed"] for host, counts in rerun.recap().items()}
    assert {"node-a", "node-b"} <= set(changed) and not any(changed.values()), rerun.where(changed=True)


def test_restore_yml_again_has_nothing_to_do():
    rerun = results(DIR / "rerun-restore.log")
    assert rc(DIR / "rerun-restore.rc") == 0, rerun.where(status="failed")
    changed = {host: counts["changed"] for host, counts in rerun.recap().items()}
    assert {"node-a", "node-b"} <= set(changed) and not any(changed.values()), rerun.where(changed=True)
    said = texts(rerun, "node-a", "tasks/restore.yml")
    assert any(t.endswith("already: nothing to do.") for t in said), said
