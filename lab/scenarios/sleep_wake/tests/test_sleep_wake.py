"""The controller's sleep -> request -> wake on the lab (`python -m lab scenario sleep_wake`, molecule/sleep_wake's
side effect), judged afterwards from what the demonstration recorded and from GPUStack and node-a now.
"""

from __future__ import annotations

import json

import pytest
import testinfra

from lab.api import NODE_A, ROUTE, STATE, WEIGHTS, read_keys, route_weights
from support.lab_suite import rc

DIR = STATE / "sleep_wake"
SLEEPER = f"{ROUTE}-node-b"


@pytest.fixture(scope="module")
def result():
    assert not (DIR / "demo.rc").exists(), (DIR / "demo.rc").read_text()
    return json.loads((DIR / "result.json").read_text())


def test_the_controller_was_installed_from_the_inventory_and_removed_again():
    assert rc(DIR / "enable.rc") == 0, (DIR / "enable.log").read_text()[-3000:]
    assert rc(DIR / "disable.rc") == 0, (DIR / "disable.log").read_text()[-3000:]
    node = testinfra.get_host(f"podman://{NODE_A}")
    assert not node.file("/etc/systemd/system/pairserve-controller.service").exists
    assert not node.file("/etc/pairserve/controller.key").exists


def test_the_idle_replica_went_to_sleep_with_no_weight(result):
    assert result["before"]["replicas"] == 1 and result["before"]["weight"] == WEIGHTS["node-b"], result["before"]
    assert result["asleep"] == {"replicas": 0, "instances": [], "weight": 0}, result["asleep"]
    # 30 s idle, 5 s drain grace, 2 s ticks: asleep well within the wait, not at once.
    assert 30 <= result["slept_after_s"] <= 300, result["slept_after_s"]


def test_the_route_answered_while_the_replica_slept(result):
    assert result["request_while_asleep"] == {"status": 200, "answered": True}


def test_the_burst_woke_it_and_the_controller_recorded_the_cold_start(result):
    assert result["after"]["replicas"] == 1 and "running" in result["after"]["instances"], result["after"]
    assert result["after"]["weight"] == WEIGHTS["node-b"], result["after"]
    wakes = [w for w in result["wakes"] if w["replica"] == SLEEPER]
    assert wakes, "the controller recorded no cold start in wakes.jsonl"
    # The controller's figure is from its scale-up to the instance running: at most the whole burst-to-running.
    assert 0 < wakes[-1]["seconds"] <= result["running_after_s"] + 10, (wakes[-1], result["running_after_s"])
    journal = (DIR / "controller.journal").read_text()
    assert f"cold start of {SLEEPER} took" in journal, journal[-2000:]


def test_the_controllers_metrics_show_the_sleep_and_the_wake(result):
    from prometheus_client.parser import text_string_to_metric_families  # pylint: disable=import-outside-toplevel
    text = result.get("controller_metrics") or ""
    assert text, "the controller's /metrics did not answer on the server node"
    fams = {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
            for f in text_string_to_metric_families(text)}
    me = (("model", SLEEPER),)
    assert fams["pairserve_controller_replica_scalings"][(("model", SLEEPER), ("to", "0"))] >= 1, fams
    assert fams["pairserve_controller_replica_scalings"][(("model", SLEEPER), ("to", "1"))] >= 1, fams
    assert fams["pairserve_controller_wakes"][me] >= 1 and fams["pairserve_controller_replica_asleep"][me] == 0
    wakes = [w for w in result["wakes"] if w["replica"] == SLEEPER]
    assert fams["pairserve_controller_last_wake_seconds"][me] == pytest.approx(wakes[-1]["seconds"], abs=0.1)
    assert fams["pairserve_controller_tick_errors"][()] == 0 and fams["pairserve_controller_ticks"][()] > 10


def test_no_request_failed_during_the_burst(result):
    assert result["burst"]["requests"] > 0
    assert result["burst"]["failed"] == 0, json.dumps(result["burst"], indent=1)


def test_the_route_has_its_inventory_weights_again():
    assert route_weights(read_keys()["management"]) == {f"{ROUTE}-{h}": w for h, w in WEIGHTS.items()}
