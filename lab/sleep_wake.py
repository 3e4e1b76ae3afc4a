#!/usr/bin/env python
"""The lab's sleep -> request -> wake demonstration of the controller (docs/controller.md), with the wake time measured.

Run by `python -m lab scenario sleep_wake` after playbooks/controller.yml turned the controller on in sleep mode (a
short idle time) on the converged lab; it only watches GPUStack and sends requests:

1. waits until the controller has put the sleep replica's route weight to 0 and scaled it to zero (no
   instance left), and times that from the start;
2. sends one ordinary request through the route while the replica sleeps (it must be answered: the warm
   replica has all the weight);
3. starts a burst of long-prompt requests (lab/route_load.py) so the warm replica's queue passes the
   wake threshold, and times how long the sleeping replica takes to run again and to get its weight back;
4. reads the controller's own record of the cold start (wakes.jsonl in its state directory on the server
   node) and its own /metrics (read on the server node, where it listens), and writes everything to --result
   (JSON), printing the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lab.api import NODE_A, ROUTE, call, items, read_keys, route_weights

WAKE_LOGS = ("/var/lib/pairserve-controller/wakes.jsonl", "/var/lib/private/pairserve-controller/wakes.jsonl")


def replica_state(key: str, name: str) -> dict:
    models = {m["name"]: m for m in items("/v2/models", key)}
    instances = [i for i in items("/v2/model-instances", key) if i["model_name"] == name]
    return {"replicas": models[name]["replicas"], "instances": [i["state"] for i in instances],
            "weight": route_weights(key).get(name)}


def wait_for(what: str, check, timeout: float, poll: float = 2.0):
    start = time.monotonic()
    last = None
    while time.monotonic() - start < timeout:
        ok, last = check()
        if ok:
            return time.monotonic() - start, last
        time.sleep(poll)
    raise SystemExit("lab sleep/wake: %s did not happen within %.0f s (last seen: %s)" % (what, timeout, last))


def read_controller_metrics(port: int = 10180) -> str:
    """The controller's /metrics text, fetched on the server node (empty when it does not answer)."""
    fetch = ("import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:%d/metrics', timeout=10)"
             ".read().decode(), end='')" % port)
    out = subprocess.run(["podman", "exec", NODE_A, "python3", "-c", fetch], capture_output=True, text=True,
                         check=False, timeout=60)
    return out.stdout if out.returncode == 0 else ""


def read_wakes() -> list:
    for path in WAKE_LOGS:
        out = subprocess.run(["podman", "exec", NODE_A, "cat", path], capture_output=True, text=True, check=False)
        if out.returncode == 0:
            return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--replica", default=ROUTE + "-node-b", help="the replica the controller lets sleep")
    parser.add_argument("--dir", required=True, type=Path, help="working directory (key, load summaries)")
    parser.add_argument("--result", required=True, type=Path)
    parser.add_argument("--sleep-timeout", type=float, default=300)
    parser.add_argument("--wake-timeout", type=float, default=600)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    keys = read_keys()
    mgmt = keys["management"]

    def warm():
        state = replica_state(mgmt, args.replica)
        return state["replicas"] >= 1 and "running" in state["instances"] and bool(state["weight"]), state

    # Start from a warm replica (an earlier demonstration may have left it asleep or waking).
    _waited, before = wait_for("the replica being warm before the demonstration", warm, args.wake_timeout)
    result = {"replica": args.replica, "route": ROUTE, "before": before}
    print("lab sleep/wake: %s before: %s" % (args.replica, result["before"]), flush=True)

    def asleep():
        state = replica_state(mgmt, args.replica)
        return state["replicas"] == 0 and not state["instances"] and state["weight"] == 0, state

    result["slept_after_s"], result["asleep"] = wait_for("the replica going to sleep", asleep, args.sleep_timeout)
    print("lab sleep/wake: asleep after %.0f s: %s" % (result["slept_after_s"], result["asleep"]), flush=True)

    status, body = call("/v1/chat/completions", keys["inference"], {
        "model": ROUTE, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Are you awake?"}]})
    result["request_while_asleep"] = {"status": status, "answered": status == 200 and bool(body.get("choices"))}
    print("lab sleep/wake: a request while it sleeps: HTTP %d" % status, flush=True)

    key_file = args.dir / "key"
    key_file.touch(mode=0o600)
    key_file.write_text(keys["inference"])
    burst_log = open(args.dir / "burst.log", "w", encoding="utf-8")  # pylint: disable=consider-using-with
    load = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "lab.route_load", "--url", "http://127.0.0.1:30080", "--model", ROUTE,
         "--key-file", str(key_file), "--summary", str(args.dir / "burst.json"), "--concurrency", "12",
         "--prompt-words", "400", "--max-tokens", "16", "--pause", "0", "--max-seconds", str(args.wake_timeout)],
        stdout=burst_log, stderr=subprocess.STDOUT)
    try:
        def awake():
            state = replica_state(mgmt, args.replica)
            return state["replicas"] >= 1 and "running" in state["instances"], state

        burst_start = time.monotonic()
        result["running_after_s"], _state = wait_for("the replica waking up", awake, args.wake_timeout)

        def weighted():
            state = replica_state(mgmt, args.replica)
            return bool(state["weight"]), state

        _waited, result["after"] = wait_for("the replica getting its weight back", weighted, 120)
        result["weight_back_after_s"] = round(time.monotonic() - burst_start, 1)
    finally:
        os.kill(load.pid, signal.SIGTERM)
        load.wait(timeout=180)
        burst_log.close()
        key_file.unlink(missing_ok=True)
    result["burst"] = json.loads((args.dir / "burst.json").read_text())
    result["wakes"] = read_wakes()
    result["controller_metrics"] = read_controller_metrics()
    tmp = args.result.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, args.result)
    last = result["wakes"][-1] if result["wakes"] else {}
    print("lab sleep/wake: burst to running %.0f s, weight back after %.0f s; the controller's record: %s" % (
        result["running_after_s"], result["weight_back_after_s"], json.dumps(last)), flush=True)
    print("lab sleep/wake: burst %d requests, %d failed" % (result["burst"]["requests"], result["burst"]["failed"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
