"""The controller's queue-aware weights on the lab (`python -m lab scenario queue_weights`, molecule/queue_weights's
side effect), judged afterwards from what the demonstration recorded and from GPUStack and node-a now.
"""

from __future__ import annotations

import json

import pytest
import testinfra
import yaml

from lab.api import NODE_A, ROUTE, STATE, WEIGHTS, read_keys, route_weights
from support.lab_suite import rc, results

DIR = STATE / "queue_weights"
FAST, SLOW = f"{ROUTE}-node-a", f"{ROUTE}-node-b"


@pytest.fixture(scope="module")
def result():
    assert not (DIR / "demo.rc").exists(), (DIR / "demo.rc").read_text()
    return json.loads((DIR / "result.json").read_text())


@pytest.fixture(scope="module")
def speeds():
    replicas = yaml.safe_load((DIR / "controller.yml").read_text())["pairserve_controller_replicas"]
    return {r["name"]: r for r in replicas}


def test_the_bench_run_measured_the_held_replica_slower(speeds):
    assert rc(DIR / "bench.rc") == 0, (DIR / "bench.log").read_text()[-3000:]
    # node-b's replica had a fraction of a core: slower in both prefill and decode, by a clear margin.
    assert speeds[SLOW]["decode_tps"] < 0.8 * speeds[FAST]["decode_tps"], speeds
    assert speeds[SLOW]["prefill_tps"] < 0.8 * speeds[FAST]["prefill_tps"], speeds


def test_the_controller_was_installed_and_removed_again():
    assert rc(DIR / "enable.rc") == 0, (DIR / "enable.log").read_text()[-3000:]
    assert rc(DIR / "disable.rc") == 0, (DIR / "disable.log").read_text()[-3000:]
    node = testinfra.get_host(f"podman://{NODE_A}")
    assert not node.file("/etc/systemd/system/pairserve-controller.service").exists
    # Turning it off gave the route its static weights back (the controller role's gpustack_route on the server node).
    back = results(DIR / "disable.log").where(host="node-a", action="pairserve.llm.gpustack_route", role="controller",
                                              task_file="tasks/absent.yml", status="ok", changed=True)
    assert len(back) == 1, "the route did not get its static weights back"


def test_idle_weights_follow_the_measured_capacities(result, speeds):
    idle = result["idle"]
    assert idle != result["static"], "the controller never moved the route off the inventory's weights"
    assert sum(idle.values()) == 100, idle
    # A replica's capacity for any request mix lies between its prefill and its decode speed ratio to the other's.
    shares = [100 * speeds[FAST][k] / (speeds[FAST][k] + speeds[SLOW][k]) for k in ("prefill_tps", "decode_tps")]
    band = result["min_change"]
    assert min(shares) - band <= idle[FAST] <= max(shares) + band, (idle, shares)
    assert idle[FAST] > idle[SLOW], idle


@pytest.mark.parametrize("replica", [SLOW, FAST])
def test_a_backlog_takes_weight_away_and_it_comes_back(result, replica):
    phase = next(p for p in result["backlogs"] if p["replica"] == replica)
    idle = result["idle"][replica]
    assert phase["load"]["requests"] > 0 and phase["load"]["failed"] == 0, phase["load"]
    assert phase["lowest"] <= phase["weight_fallen"] <= idle - result["min_change"], phase
    # The backlog was visible within a few of the controller's 2 s ticks and its 4 s hold.
    assert phase["fell_after_s"] < 60, phase
    assert phase["weight_back"] >= idle - result["min_change"], phase
    # The weight trace of the phase really went down and up again (not a single sample).
    trace = [s["weights"][replica] for s in result["trace"] if s["phase"].startswith("backlog-" + replica)]
    assert min(trace) == phase["lowest"] and trace[-1] == phase["weight_back"], trace


def test_the_slow_replica_lost_more_under_its_backlog_than_its_idle_share(result):
    slow = next(p for p in result["backlogs"] if p["replica"] == SLOW)
    # With a backlog longer than the 30 s horizon the slow replica gets no new work beyond the bound.
    assert slow["lowest"] <= result["idle"][SLOW] / 2, slow


def test_nothing_failed_through_the_route_while_the_weights_moved(result):
    load = result["route_load"]
    assert load["requests"] > 0
    assert load["failed"] == 0, json.dumps(load, indent=1)


def test_the_controller_logged_its_route_updates():
    journal = (DIR / "controller.journal").read_text()
    assert f"set route {ROUTE} weights" in journal, journal[-2000:]


def test_the_route_has_its_inventory_weights_again():
    assert route_weights(read_keys()["management"]) == {f"{ROUTE}-{h}": w for h, w in WEIGHTS.items()}
