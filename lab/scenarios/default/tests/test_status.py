"""playbooks/status.yml on the converged lab: the table with both replicas running on their GPUs by UUID, changed=0;
then one replica's vLLM container stopped, and the play fails naming that replica.

GPUStack restarts an instance whose container stopped (restart_on_error): its worker marks the instance `error`,
schedules it again and starts a new container, which boots for a while. The failure is asserted while the instance
is not running, whatever state GPUStack has moved it to; then the container is started again (GPUStack may have
replaced it already) and the test waits until the instance runs and requests through the route are answered, so
the suites after this one find the lab as it was.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from lab.api import ENGINES, REPO, ROUTE, call, items, read_keys, replica_container
from support.recap import parse_recap

STOPPED = f"{ROUTE}-node-b"
RECORDED = {"node-a": "node-a-2x5080.json", "node-b": "node-b-2x4070tis.json"}
# The lab's CPU replica boots in one to three minutes; GPUStack's first restart comes without delay.
RECOVERY_S = 300


@pytest.fixture(name="keys", scope="module")
def fixture_keys():
    return read_keys()


def status_play():
    run = subprocess.run([str(REPO / ".venv/bin/ansible-playbook"), "-i", "lab/inventory/hosts.yml",
                          "playbooks/status.yml"], cwd=REPO, capture_output=True, text=True, check=False,
                         timeout=600, env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    return run


def instances(key) -> dict:
    return {i["model_name"]: i for i in items("/v2/model-instances", key)}


def state(key, model) -> str | None:
    """The instance's state; None while GPUStack shows none (between a removal and a new one)."""
    return instances(key).get(model, {}).get("state")


def recorded_uuids(host) -> list:
    recording = json.loads((REPO / "tests" / "fixtures" / "nvml" / RECORDED[host]).read_text())
    return sorted(device["UUID"] for device in recording["devices"])


def pinned_uuids(key) -> dict:
    """{model: [UUID, ...]}: each replica's gpu_selector ids looked up in its worker's record."""
    by_worker = {w["name"]: {d["index"]: d["uuid"] for d in (w.get("status") or {}).get("gpu_devices") or []}
                 for w in items("/v2/workers", key)}
    found = {}
    for model in items("/v2/models", key):
        ids = (model.get("gpu_selector") or {}).get("gpu_ids") or []
        found[model["name"]] = [by_worker[i.rsplit(":", 2)[0]][int(i.rsplit(":", 2)[2])] for i in ids]
    return found


def wait_for(what, predicate, timeout=RECOVERY_S, every=5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(every)


def route_answers(key) -> bool:
    for n in range(4):
        code, dummy = call("/v1/chat/completions", key, {
            "model": ROUTE, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": f"Is the pair ready? (status {n})"}]})
        if code != 200:
            return False
    return True


def test_the_table_shows_both_replicas_running_on_their_gpus_and_changes_nothing(keys):
    run = status_play()
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    recap = parse_recap(run.stdout)
    assert recap and set(recap) == {"node-a", "node-b"}, run.stdout[-2000:]
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in recap.values()), recap
    running = instances(keys["management"])
    uuids = pinned_uuids(keys["management"])
    lines = run.stdout.splitlines()
    for host in ("node-a", "node-b"):
        model = f"{ROUTE}-{host}"
        inst = running[model]
        # The pair's cards, as the recorded host has them.
        assert sorted(uuids[model]) == recorded_uuids(host), uuids
        fields = (model, re.escape(inst["name"]), host, uuids[model][0])
        row = re.compile(r"^\s+%s\s+%s\s+running\s+%s\s+%s\s" % fields)
        first = [n for n, line in enumerate(lines) if row.match(line)]
        assert len(first) == 1, (model, uuids[model], run.stdout[-4000:])
        # The pair's second GPU on the next line, under the first.
        assert lines[first[0] + 1].strip() == uuids[model][1], lines[first[0]:first[0] + 2]
        # The GPU node's cache was measured.
        assert re.search(r"^\s+%s\s+/var/lib/pairserve-lab/%s/hf-cache\s+\d+\.\d GiB" % (host, host), run.stdout,
                         re.M), run.stdout[-3000:]
    # The converge's verify left its record on the server node.
    assert re.search(r"^\s+passed at \S+: %s \(" % ROUTE, run.stdout, re.M), run.stdout[-3000:]
    assert "Up: every worker is ready" in run.stdout


def test_a_stopped_replica_fails_the_play_naming_it_then_the_lab_recovers(keys):
    key = keys["management"]
    before = instances(key)[STOPPED]
    assert before["state"] == "running", before
    container = replica_container(before["name"])
    try:
        subprocess.run(ENGINES[container["PairserveEngine"]] + ["stop", "--time", "10", container["Id"]], check=True,
                       capture_output=True,
                       text=True, timeout=120)
        deadline = time.monotonic() + RECOVERY_S
        while True:
            wait_for(f"GPUStack to see {STOPPED} down", lambda: state(key, STOPPED) != "running", timeout=120,
                     every=2)
            run = status_play()
            if run.returncode != 0:
                break
            # Restarted and booted between the look and the play: stop the new container too.
            assert time.monotonic() < deadline, "the instance never stayed down long enough:\n" + run.stdout[-3000:]
            again = replica_container(before["name"])
            subprocess.run(ENGINES[again["PairserveEngine"]] + ["stop", "--time", "10", again["Id"]],
                           check=True, capture_output=True, text=True, timeout=120)
        assert run.returncode == 2, run.stdout[-4000:] + run.stderr[-2000:]
        out = re.sub(r"\s+", " ", run.stdout)
        assert re.search(r"Down: .*- replica %s: instance %s is \w+ on node-b" % (STOPPED, re.escape(before["name"])),
                         out), run.stdout[-4000:]
        assert f"route {ROUTE}: target {STOPPED} (weight" in out, run.stdout[-4000:]
        assert (parse_recap(run.stdout) or {}).get("node-a", {}).get("changed") == 0, run.stdout[-2000:]
    finally:
        # GPUStack may already have removed that container and started a new one: then this start fails, harmlessly.
        subprocess.run(ENGINES[container["PairserveEngine"]] + ["start", container["Id"]], check=False,
                       capture_output=True, text=True,
                       timeout=120)
        wait_for(f"{STOPPED} to run again", lambda: state(key, STOPPED) == "running")
        wait_for("requests through the route to be answered", lambda: route_answers(keys["inference"]))
    assert status_play().returncode == 0
