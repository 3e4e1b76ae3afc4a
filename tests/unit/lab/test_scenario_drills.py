"""The pure parts of the lab's drills: the scenarios' event times (lab/snapshots.py), GPUStack's state shaped by name
(the site snapshot of the restore and faults scenarios, the maintenance snapshot), the restore drill's figures from
its times and the request loop's summary, the archive the restore takes, the faults scenario's cut of node-b's SSH
port, and the reboot watcher's requests."""

from __future__ import annotations

import json
import re

from lab import reboot_watcher, snapshots
from lab.scenarios.faults import steps as faults
from lab.scenarios.maintenance import steps as maintenance
from lab.scenarios.restore import steps as restore

TIMES = ("destroyed=1733600000.000000000\n"
         "node_bare=1733600090.500000000\n"
         "restored=1733600300.300000000\n"
         "rebuilt=1733600700.100000000\n"
         "site_done=1733600900.000000000\n")
LOAD = {"requests": 500, "ok": 440, "failed": 60, "failures_by_class": {"connection": 58, "http_503": 2},
        "longest_outage": {"from": 1733600001.0, "to": 1733600061.37, "failed": 58},
        "ok_after_longest_outage": 400, "failures_after_longest_outage": {"http_503": 2}}


# --- event times -------------------------------------------------------------------------------------------------

def test_stamp_writes_seconds_and_nanoseconds_as_date_does():
    assert snapshots.stamp(1733600000123456789) == "1733600000.123456789"
    assert snapshots.stamp(1733600000000000005) == "1733600000.000000005"
    assert snapshots.stamp(5) == "0.000000005"


def test_record_time_appends_one_line_per_event(tmp_path):
    times = tmp_path / "times"
    snapshots.record_time(times, "destroyed")
    snapshots.record_time(times, "node_bare")
    lines = times.read_text().splitlines()
    assert [line.split("=", 1)[0] for line in lines] == ["destroyed", "node_bare"]
    assert all(re.fullmatch(r"[a-z_]+=\d{10}\.\d{9}", line) for line in lines), lines
    read = snapshots.read_times(times)
    assert read["destroyed"] <= read["node_bare"]


def test_read_times_skips_lines_without_a_name_and_keeps_the_last_of_a_name(tmp_path):
    times = tmp_path / "times"
    times.write_text("cut=1733600000.123456789\n\nnoise\n killed=1733600010.5 \ncut=1733600001.000000000\n")
    assert snapshots.read_times(times) == {"cut": 1733600001.0, "killed": 1733600010.5}


# --- GPUStack by name ----------------------------------------------------------------------------------------------

def test_site_shape_names_routes_targets_models_keys_workers_and_instances():
    models = [{"id": 2, "name": "qwen-node-b"}, {"id": 1, "name": "qwen-node-a"}]
    routes = [{"id": 10, "name": "qwen"}, {"id": 11, "name": "spare"}]
    targets = [{"route_id": 10, "model_id": 1, "weight": 60}, {"route_id": 10, "model_id": 2, "weight": 40},
               {"route_id": 10, "model_id": 3, "weight": 5},     # a model GPUStack no longer lists: its id
               {"route_id": 10, "model_id": None, "weight": 9},  # no model: left out
               {"route_id": 99, "model_id": 1, "weight": 1}]     # a route not listed: left out
    api_keys = [{"name": "pairserve-inference", "id": 5}, {"name": "pairserve-controller", "id": 4}]
    workers = [{"name": "node-a", "id": 1, "state": "ready", "ip": "127.0.0.1"},
               {"name": "node-b", "id": 2, "state": "not_ready"}]
    instances = [{"model_name": "qwen-node-a", "id": 7, "state": "running", "worker_name": "node-a"},
                 {"model_name": "qwen-node-b", "id": 8, "state": "starting"}]
    assert snapshots.site_shape(models, routes, targets, api_keys, workers, instances) == {
        "routes": {"qwen": {"qwen-node-a": 60, "qwen-node-b": 40, "3": 5}, "spare": {}},
        "models": ["qwen-node-a", "qwen-node-b"],
        "api_keys": ["pairserve-controller", "pairserve-inference"],
        "workers": {"node-a": {"id": 1, "state": "ready"}, "node-b": {"id": 2, "state": "not_ready"}},
        "instances": {"qwen-node-a": {"id": 7, "state": "running", "worker": "node-a"},
                      "qwen-node-b": {"id": 8, "state": "starting", "worker": None}},
    }


def test_maintenance_shape_names_instances_workers_weights_and_keeps_node_b_start():
    models = [{"id": 1, "name": "qwen-node-a"}, {"id": 2, "name": "qwen-node-b"}]
    instances = [{"model_name": "qwen-node-b", "id": 8, "state": "running", "worker_name": "node-b"}]
    workers = [{"name": "node-b", "state": "ready", "maintenance": {"enabled": False}, "id": 2},
               {"name": "node-a", "state": "ready"}]
    targets = [{"model_id": 1, "weight": 60}, {"model_id": 2, "weight": 0}, {"model_id": 9, "weight": 3},
               {"model_id": None, "weight": 1}]
    started = "2024-12-07 19:33:20.123456789 +0000 UTC"
    assert maintenance.maintenance_shape(models, instances, workers, targets, started) == {
        "instances": {"qwen-node-b": {"id": 8, "state": "running"}},
        "workers": {"node-b": {"state": "ready", "maintenance": {"enabled": False}},
                    "node-a": {"state": "ready", "maintenance": None}},
        "weights": {"qwen-node-a": 60, "qwen-node-b": 0, "9": 3},
        "node_b_started": started,
    }


# --- the restore drill's figures ------------------------------------------------------------------------------------

FIGURES_TEXT = (
    "=== lab figures: restore drill (node-a destroyed at 19:33:20 UTC)\n"
    "  recovery time (the route answered nothing): 61.4 s, from the destroy to the first request answered again "
    "(58 requests failed in it)\n"
    "  node-a bare again (container, SSH):          90.5 s\n"
    "  restore.yml done:                            300.3 s\n"
    "  node-a's replica back (rebuild_node.yml):    700.1 s\n"
    "  total (site.yml done):                       900.0 s\n"
    '  requests through the route with the old key: 500, 440 ok, 60 failed {"connection": 58, "http_503": 2}; '
    'after the recovery 400 ok, failed {"http_503": 2}\n')


def test_restore_figures_from_the_times_and_the_loop_summary(tmp_path):
    (tmp_path / "times").write_text(TIMES)
    (tmp_path / "load.json").write_text(json.dumps(LOAD))
    text = restore.restore_figures(tmp_path)
    assert text == FIGURES_TEXT
    assert json.loads((tmp_path / "figures.json").read_text()) == {
        "times": {"destroyed": 1733600000.0, "node_bare": 1733600090.5, "restored": 1733600300.3,
                  "rebuilt": 1733600700.1, "site_done": 1733600900.0},
        "outage": {"from": 1733600001.0, "to": 1733600061.37, "failed": 58},
        "recovery_s": 61.4, "node_bare_s": 90.5, "restore_done_s": 300.3, "node_a_replica_back_s": 700.1,
        "total_s": 900.0, "requests": 500, "ok": 440, "failed": 60,
        "failures_by_class": {"connection": 58, "http_503": 2},
        "ok_after_recovery": 400, "failed_after_recovery": {"http_503": 2},
    }
    # What the restore suite matches in figures.txt (the scenario writes this text there).
    assert re.search(r"recovery time \(the route answered nothing\): %s s" % re.escape("61.4"), text)


def test_restore_figures_without_a_recovery_or_the_later_steps(tmp_path):
    # The route never answered again, and the drill stopped after recreating node-a.
    (tmp_path / "times").write_text("destroyed=1733600000.000000000\nnode_bare=1733600090.500000000\n")
    (tmp_path / "load.json").write_text(json.dumps({"requests": 30, "ok": 10, "failed": 20,
                                                    "failures_by_class": {"connection": 20},
                                                    "longest_outage": None}))
    text = restore.restore_figures(tmp_path)
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert {k: figures[k] for k in ("outage", "recovery_s", "node_bare_s", "restore_done_s", "node_a_replica_back_s",
                                    "total_s", "ok_after_recovery", "failed_after_recovery")} == {
        "outage": {}, "recovery_s": None, "node_bare_s": 90.5, "restore_done_s": None,
        "node_a_replica_back_s": None, "total_s": None, "ok_after_recovery": None, "failed_after_recovery": None}
    assert text.splitlines()[1] == ("  recovery time (the route answered nothing): None s, from the destroy to the "
                                    "first request answered again (None requests failed in it)")
    assert text.splitlines()[-1] == ('  requests through the route with the old key: 30, 10 ok, 20 failed '
                                     '{"connection": 20}; after the recovery None ok, failed null')


def test_an_outage_that_ended_before_the_destroy_is_no_recovery():
    figures = restore.figures_of({"destroyed": 1733600000.0},
                                 dict(LOAD, longest_outage={"from": 1733599990.0, "to": 1733599995.0, "failed": 3}))
    assert figures["recovery_s"] is None
    assert figures["outage"] == {"from": 1733599990.0, "to": 1733599995.0, "failed": 3}


def test_the_restore_takes_the_last_archive_fetched(tmp_path):
    backups = tmp_path / "backups" / "node-a"
    assert restore.latest_archive(backups) is None
    backups.mkdir(parents=True)
    for name in ("pairserve-backup-20241207T193500Z.tar.gz", "pairserve-backup-20241207T180000Z.tar.gz",
                 "pairserve-backup-20241207T193600Z.tar.gz.part", "notes.txt"):
        (backups / name).write_text("")
    assert restore.latest_archive(backups) == backups / "pairserve-backup-20241207T193500Z.tar.gz"


# --- the faults scenario's cut --------------------------------------------------------------------------------------

def test_the_cut_refuses_the_port_with_a_reset_in_the_lab_table():
    assert faults.cut_rules(2223) == ("table inet pairserve_lab_fault {\n"
                                      "  chain input {\n"
                                      "    type filter hook input priority -10; policy accept;\n"
                                      "    tcp dport 2223 reject with tcp reset\n"
                                      "  }\n"
                                      "}\n")


def test_the_cut_waits_for_the_checkpoint_play_at_the_start_of_a_line():
    log = ("PLAY [Validate the inventory] ***\n"
           "TASK [Show it] ***\nok: [node-a] => {\"msg\": \"PLAY [Pinned checkpoint next\"}\n")
    assert not faults.CHECKPOINT_PLAY.search(log)
    assert faults.CHECKPOINT_PLAY.search(log + "\nPLAY [Pinned checkpoint on the GPU nodes] ***\n")


def test_the_cutter_stopped_before_the_checkpoint_play_ends_and_cuts_nothing(tmp_path):
    cutter = faults.Cutter(tmp_path).start()
    (tmp_path / "cut.log").write_text("PLAY [Validate the inventory] ***\n")
    cutter.stop()
    assert not cutter.thread.is_alive()
    assert not (tmp_path / "times").exists()
    assert (tmp_path / "cutter.log").read_text() == "the checkpoint play did not begin: no cut\n"


# --- the reboot watcher's requests ----------------------------------------------------------------------------------

def test_the_reboot_requests_are_the_directory_files_by_name(tmp_path):
    assert reboot_watcher.requests(tmp_path / "reboot") == []
    reboots = tmp_path / "reboot"
    reboots.mkdir()
    for name in ("node-b", "node-a", ".node-a.tmp"):
        (reboots / name).write_text("")
    assert reboot_watcher.requests(reboots) == [reboots / "node-a", reboots / "node-b"]
