#!/usr/bin/env python
"""The lab's queue-aware weights demonstration of the controller (docs/queue-aware-weights.md).

`python -m lab scenario queue_weights` (lab/scenarios/queue_weights/steps.py) makes the lab's two CPU replicas differ
in speed (node-b's replica container is held to a fraction of its core by its CPU quota, as the seed's Ada pair is
slower than the Blackwell pair), measures both with playbooks/bench.yml, and turns the controller on in weights mode
with the measured speeds (playbooks/controller.yml). This script then only watches GPUStack's route and sends
requests:

    python -m lab.queue_weights speeds --bench RESULTS_JSON --base VARS_YML --out VARS_YML
        the controller's settings for the lab with each replica's measured prefill tok/s and saturated decode
        tok/s from a bench run (the bench module's results.json)
    python -m lab.queue_weights demo --vars VARS_YML --dir DIR --result RESULT_JSON
        1. idle: the route's weights leave the inventory's static 58/42 for the split of the measured
           capacities; a split of capacities always lies between the prefill ratio and the decode ratio;
        2. a backlog sent straight to the slow replica (not through the route, as another route or a client
           pinned to it would): its weight must fall, then come back once the backlog is gone;
        3. the same on the fast replica (each backlog is sized from the replica's decode speed to about the
           controller's horizon of queued work);
        4. a mixed load through the route while the controller steers: no request may fail.
        Every phase's weight trace, timings and load summaries go to --result (JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from lab.api import ROUTE, WEIGHTS, call, items, read_keys, route_weights

FAST, SLOW = ROUTE + "-node-a", ROUTE + "-node-b"


def speeds(args) -> int:
    run = json.loads(args.bench.read_text())
    measured = {}
    for target in run["targets"]:
        if target.get("kind") != "replica":
            continue
        m = target["measurement"]
        prefill = (m.get("prefill") or {}).get("prefill_tok_s")
        # Aggregate decode at the bench's concurrency (the controller's decode_tps), else the sweep's ceiling.
        decode = (m.get("concurrency") or {}).get("throughput_tok_s") or (m.get("sweep") or {}).get("ceiling_tok_s")
        if not prefill or not decode:
            raise SystemExit("lab weights: the bench run %s has no prefill or decode figure for %s: %s"
                             % (args.bench, target["name"], json.dumps(m)[:300]))
        measured[target["name"]] = (round(prefill, 1), round(decode, 1))
    missing = {FAST, SLOW} - set(measured)
    if missing:
        raise SystemExit("lab weights: the bench run %s measured no %s" % (args.bench, ", ".join(sorted(missing))))
    settings = yaml.safe_load(args.base.read_text())
    # The static weights stay the inventory's pairserve_route_weights (the controller role derives them from it and
    # gives them back when the controller is turned off).
    settings["pairserve_controller_replicas"] = [
        {"name": name, "prefill_tps": measured[name][0], "decode_tps": measured[name][1]} for name in (FAST, SLOW)]
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(settings, sort_keys=False))
    os.replace(tmp, args.out)
    for name in (FAST, SLOW):
        print("lab weights: %s measured %.0f prefill tok/s, %.1f decode tok/s (at the bench's concurrency)" % (name, *measured[name]))
    return 0


class Trace:
    """The route's weights over time, sampled by the phases."""

    def __init__(self, key: str):
        self.key = key
        self.start = time.monotonic()
        self.samples: list = []

    def sample(self, phase: str) -> dict:
        weights = route_weights(self.key)
        self.samples.append({"t": round(time.monotonic() - self.start, 1), "phase": phase, "weights": weights})
        return weights

    def wait(self, phase: str, what: str, check, timeout: float, poll: float = 1.0):
        start = time.monotonic()
        weights = None
        while time.monotonic() - start < timeout:
            weights = self.sample(phase)
            if check(weights):
                return round(time.monotonic() - start, 1), weights
            time.sleep(poll)
        raise SystemExit("lab weights: %s did not happen within %.0f s (weights: %s)" % (what, timeout, weights))


def instance_url(key: str, name: str) -> str:
    running = [i for i in items("/v2/model-instances", key) if i["model_name"] == name and i["state"] == "running"]
    if not running:
        raise SystemExit("lab weights: %s has no running instance" % name)
    return "http://%s:%s" % (running[0]["worker_ip"], running[0]["port"])


def start_load(args, name: str, url: str, model: str, concurrency: int, prompt_words: int, max_tokens: int,
               seconds: float):
    log = open(args.dir / (name + ".log"), "w", encoding="utf-8")  # pylint: disable=consider-using-with
    proc = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "lab.route_load", "--url", url, "--model", model,
         "--key-file", str(args.dir / "key"), "--summary", str(args.dir / (name + ".json")),
         "--concurrency", str(concurrency), "--prompt-words", str(prompt_words), "--max-tokens", str(max_tokens),
         "--pause", "0", "--max-seconds", str(seconds), "--timeout", "300"],
        stdout=log, stderr=subprocess.STDOUT)
    return proc, log


def stop_load(args, name: str, proc, log) -> dict:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=360)
    log.close()
    return json.loads((args.dir / (name + ".json")).read_text())


def backlog_concurrency(base: int, speed: dict, replica: str, horizon: float, max_tokens: int) -> int:
    """The backlog's concurrency for ``replica``: enough requests at a time that its queued work is about the
    controller's horizon (``c`` requests of ``max_tokens`` outputs, half of them decoded on average, at the replica's
    decode speed), and never less than ``base``. The queued seconds are then alike on both replicas whatever their
    speeds: with one concurrency for both, the fast replica's queue stays within a tick of work and its weight falls
    by the dead band at most, and a faster slow replica's weight falls short of half its share."""
    decode = float(speed[replica]["decode_tps"])
    return max(base, int(math.ceil(2.0 * float(horizon) * decode / float(max_tokens))))


def backlog_phase(args, trace: Trace, key: str, replica: str, idle: dict, min_change: int, concurrency: int) -> dict:
    """A backlog sent straight to one replica: its weight falls; after it, the weight comes back."""
    phase = "backlog-" + replica
    url = instance_url(key, replica)
    proc, log = start_load(args, phase, url, replica, concurrency, args.backlog_prompt_words,
                           args.backlog_max_tokens, args.backlog_seconds)
    try:
        fell_after, low = trace.wait(phase, "%s's weight falling under its backlog" % replica,
                                     lambda w: w[replica] <= idle[replica] - min_change, args.backlog_seconds)
        lowest = low[replica]
        while proc.poll() is None:  # keep the backlog up to its end, noting how far the weight goes
            lowest = min(lowest, trace.sample(phase)[replica])
            time.sleep(1)
    finally:
        load = stop_load(args, phase, proc, log)
    back_after, back = trace.wait(phase + "-after", "%s's weight coming back after its backlog" % replica,
                                  lambda w: w[replica] >= idle[replica] - min_change, args.settle_timeout)
    figures = (replica, load["requests"], concurrency, idle[replica], low[replica], fell_after, lowest, back[replica],
               back_after)
    print("lab weights: backlog on %s (%d requests straight to it, %d at a time): weight %d -> %d after %.0f s, "
          "lowest %d; back to %d %.0f s after the backlog ended" % figures, flush=True)
    return {"replica": replica, "concurrency": concurrency, "fell_after_s": fell_after, "weight_fallen": low[replica], "lowest": lowest,
            "back_after_s": back_after, "weight_back": back[replica], "load": load}


def demo(args) -> int:
    settings = yaml.safe_load(args.vars.read_text())
    min_change = int(settings.get("pairserve_controller_min_change", 5))
    horizon = float(settings["pairserve_controller_horizon"])
    speed = {r["name"]: r for r in settings["pairserve_controller_replicas"]}
    args.dir.mkdir(parents=True, exist_ok=True)
    keys = read_keys()
    mgmt = keys["management"]
    key_file = args.dir / "key"
    key_file.touch(mode=0o600)
    key_file.write_text(keys["inference"])
    trace = Trace(mgmt)
    # The inventory's weights (the route role's); the controller may have moved them already when this starts.
    result = {"route": ROUTE, "speeds": speed, "min_change": min_change,
              "static": {"%s-%s" % (ROUTE, host): weight for host, weight in WEIGHTS.items()},
              "start": trace.sample("start")}
    print("lab weights: route %s at %s when the demonstration starts (inventory: %s)"
          % (ROUTE, result["start"], result["static"]), flush=True)
    try:
        # 1. Idle: the split of the measured capacities, between the prefill ratio and the decode ratio.
        share = {kind: 100.0 * speed[FAST][kind] / (speed[FAST][kind] + speed[SLOW][kind])
                 for kind in ("prefill_tps", "decode_tps")}
        low, high = min(share.values()) - min_change, max(share.values()) + min_change

        def settled(weights):
            return weights != result["static"] and low <= weights[FAST] <= high

        result["idle_after_s"], idle = trace.wait("idle", "the idle split of the measured speeds", settled,
                                                  args.settle_timeout)
        result["idle"] = idle
        result["idle_band"] = [round(low, 1), round(high, 1)]
        print("lab weights: idle split %s after %.0f s (measured capacities put %s between %.0f and %.0f)"
              % (idle, result["idle_after_s"], FAST, low, high), flush=True)
        # 2. and 3. A backlog on each replica in turn.
        result["backlogs"] = [backlog_phase(args, trace, mgmt, name, idle, min_change,
                                            backlog_concurrency(args.backlog_concurrency, speed, name, horizon,
                                                                args.backlog_max_tokens))
                              for name in (SLOW, FAST)]
        # 4. Mixed load through the route while the controller steers.
        proc, log = start_load(args, "route", "http://127.0.0.1:30080", ROUTE, args.route_concurrency,
                               args.backlog_prompt_words, args.backlog_max_tokens, args.route_seconds)
        try:
            while proc.poll() is None:
                trace.sample("route")
                time.sleep(1)
        finally:
            result["route_load"] = stop_load(args, "route", proc, log)
        result["route_weights_seen"] = sorted({json.dumps(s["weights"], sort_keys=True) for s in trace.samples
                                               if s["phase"] == "route"})
        print("lab weights: through the route: %d requests, %d failed; weights seen %s" % (
            result["route_load"]["requests"], result["route_load"]["failed"], ", ".join(result["route_weights_seen"])))
    finally:
        key_file.unlink(missing_ok=True)
        result["trace"] = trace.samples
        tmp = args.result.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        os.replace(tmp, args.result)
    status, body = call("/v1/chat/completions", keys["inference"], {
        "model": ROUTE, "max_tokens": 4, "messages": [{"role": "user", "content": "Still there?"}]})
    if status != 200:
        raise SystemExit("lab weights: the route stopped answering after the demonstration: HTTP %d %s" % (status, body))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sp = sub.add_parser("speeds", help="controller settings with the speeds a bench run measured")
    sp.add_argument("--bench", required=True, type=Path,
                    help="results.json of a playbooks/bench.yml baseline (<report_dir>/<stamp>-<label>-baseline/)")
    sp.add_argument("--base", required=True, type=Path, help="the lab's controller settings (YAML)")
    sp.add_argument("--out", required=True, type=Path)
    dp = sub.add_parser("demo", help="watch and drive the controller on the converged lab")
    dp.add_argument("--vars", required=True, type=Path, help="the controller settings the play ran with")
    dp.add_argument("--dir", required=True, type=Path, help="working directory (key, load logs and summaries)")
    dp.add_argument("--result", required=True, type=Path)
    dp.add_argument("--settle-timeout", type=float, default=180)
    # Twice the lab profile's 8 sequences, so requests wait on the replica as well as run.
    dp.add_argument("--backlog-seconds", type=float, default=60)
    dp.add_argument("--backlog-concurrency", type=int, default=16,
                    help="the least backlog concurrency; each replica's is raised to about the horizon's work")
    dp.add_argument("--backlog-prompt-words", type=int, default=300)
    dp.add_argument("--backlog-max-tokens", type=int, default=96)
    dp.add_argument("--route-concurrency", type=int, default=6)
    dp.add_argument("--route-seconds", type=float, default=60)
    args = parser.parse_args()
    return speeds(args) if args.command == "speeds" else demo(args)


if __name__ == "__main__":
    sys.exit(main())
