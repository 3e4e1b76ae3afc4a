# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller at work: each tick observes GPUStack and the replicas' vLLM metrics, runs ``policy.step`` and
carries out its actions (or, in a dry run, only logs them)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time

from pairserve_controller.config import number, policy_from_config
from pairserve_controller.exposition import Exposition
from pairserve_controller.gpustack_access import GpuStack, GpuStackError, metrics_url_of, running_instance
from pairserve_controller.policy import (
    SLEEPING,
    WAKING,
    WARM,
    Inputs,
    MeanTracker,
    State,
    initial_state,
    load_from_snapshot,
    step,
)
from pairserve_controller.vllm_metrics import MetricsError, read_snapshot

LOG = logging.getLogger("pairserve_controller")


class Controller:
    """Drives ``step`` with real observations and carries out its actions (or only logs them: dry_run)."""

    def __init__(self, cfg, api=None, dry_run=False, clock=time.monotonic, sleep=time.sleep, read_metrics=None):
        self.cfg = cfg
        self.policy = policy_from_config(cfg)
        gcfg = cfg["gpustack"]
        key = gcfg.get("api_key")
        if not key and gcfg.get("api_key_file"):
            with open(gcfg["api_key_file"], encoding="utf-8") as handle:
                key = handle.read().strip()
        self.timeout = number(gcfg, "timeout", 10)
        self.retries = number(gcfg, "retries", 3, int)
        self._sleep = sleep
        # (url, served model name) -> MetricsSnapshot; MetricsError when unreadable
        self._read_metrics = read_metrics or (lambda url, name: read_snapshot(
            url, name, timeout=self.timeout, retries=min(self.retries, 2), sleep=self._sleep))
        self.api = api or GpuStack(gcfg.get("url") or "", key, self.timeout, retries=self.retries, sleep=sleep,
                                   ca_path=gcfg.get("ca_path") or None)
        self.route_name = gcfg.get("route")
        if not self.route_name:
            raise ValueError("config: [gpustack] route is required (the route name clients call)")
        self.dry_run = dry_run
        self.clock = clock
        self.trackers = {n: MeanTracker(self.policy.prior_prompt, self.policy.prior_generation)
                         for n in self.policy.names}
        self.state = None
        self.wake_log = cfg["controller"].get("wake_log")
        self.wakes = []
        self.metrics = Exposition()
        self.metrics.set("pairserve_controller_info", 1, route=self.route_name, mode=self.policy.mode,
                         sleep="true" if self.policy.sleep_enabled else "false",
                         dry_run="true" if dry_run else "false")

    def _models(self):
        models = self.api.models_by_name()
        missing = [n for n in self.policy.names if n not in models]
        if missing:
            raise GpuStackError("replica model(s) %s are not in GPUStack (it has: %s)"
                                % (", ".join(missing), ", ".join(sorted(models)) or "none"))
        return models

    def observe(self, models):
        """Loads and readiness of every replica, plus the models' replica counts."""
        loads, ready = {}, {}
        for name in self.policy.names:
            rep = self.cfg["replicas"][name]
            model = models[name]
            inst = running_instance(self.api.instances(model["id"])) if model.get("replicas", 1) > 0 else None
            url = rep.get("metrics_url") or "auto"
            if url == "auto":
                url = metrics_url_of(inst) if inst else None
            loads[name], ready[name] = None, False
            if inst is None or not url:
                continue
            try:
                snap = self._read_metrics(url, rep.get("served_model_name"))
            except MetricsError as err:
                LOG.warning("metrics of %s unreadable: %s", name, err)
                continue
            mean_p, mean_g = self.trackers[name].update(snap)
            loads[name] = load_from_snapshot(snap, mean_p, mean_g)
            ready[name] = not snap.asleep
        return Inputs(now=self.clock(), loads=loads, ready=ready)

    def tick(self):
        """One observation, one ``step``, its actions applied. Returns the actions."""
        models = self._models()
        inputs = self.observe(models)
        route = self.api.route(self.route_name)
        targets = self.api.route_targets(route["id"])
        names_by_id = {m["id"]: n for n, m in models.items()}
        current = {names_by_id[t["model_id"]]: t.get("weight", 0) for t in targets if t.get("model_id") in names_by_id}
        unknown = [n for n in self.policy.names if n not in current]
        if unknown:
            raise GpuStackError("route %r has no target for replica(s) %s" % (self.route_name, ", ".join(unknown)))
        if self.state is None:
            pol = self.policy
            if pol.sleep_enabled:
                self.state = initial_state(models[pol.sleeper].get("replicas", 1), inputs.ready.get(pol.sleeper),
                                           inputs.now)
            else:
                self.state = State()
            self.state = dataclasses.replace(self.state, weights=current)
        elif not self.dry_run:  # a dry run's state is what it would have done, not what GPUStack has
            self._resync(models, inputs, current)
        self.state, actions = step(self.state, inputs, self.policy)
        for action in actions:
            self.apply(action, route, targets, models)
        self._expose(inputs)
        return actions

    def _expose(self, inputs):
        """What this tick saw and decided, for /metrics."""
        m, state = self.metrics, self.state
        m.inc("pairserve_controller_ticks_total")
        m.set("pairserve_controller_last_tick_timestamp_seconds", time.time())
        for name in self.policy.names:
            if name in (state.weights or {}):
                m.set("pairserve_controller_route_weight", state.weights[name], route=self.route_name, model=name)
            m.set("pairserve_controller_replica_ready", 1 if inputs.ready.get(name) else 0, model=name)
            load = inputs.loads.get(name)
            m.set("pairserve_controller_replica_requests_waiting", load.waiting if load else 0, model=name)
            m.set("pairserve_controller_replica_requests_running", load.running if load else 0, model=name)
        if self.policy.sleep_enabled:
            m.set("pairserve_controller_replica_asleep", 1 if state.phase == SLEEPING else 0, model=self.policy.sleeper)

    def _resync(self, models, inputs, current):
        """Adopt what changed in GPUStack outside the controller since the last tick, so ``step`` corrects it.

        A site.yml run does that: the route role puts its static weights back and the replica role sets
        ``replicas: 1`` - a sleeping replica would get route weight with no instance (503s) while the controller
        trusted its memory. Also a route PUT that failed half-way.
        """
        state = self.state
        if current != state.weights:
            LOG.warning("route %s has weights %s, not the %s set last: changed outside the controller",
                        self.route_name, current, state.weights)
            state = dataclasses.replace(state, weights=current, last_weights_at=None)
        pol = self.policy
        if pol.sleep_enabled:
            replicas = models[pol.sleeper].get("replicas", 1)
            if state.phase == SLEEPING and replicas > 0:
                LOG.warning("%s was scaled to %s outside the controller while asleep: treated as a wake",
                            pol.sleeper, replicas)
                state = dataclasses.replace(state, phase=WAKING, wake_started=inputs.now, wake_timeout_reported=False)
            elif state.phase in (WARM, WAKING) and replicas == 0:
                LOG.warning("%s was scaled to zero outside the controller: treated as asleep", pol.sleeper)
                state = dataclasses.replace(state, phase=SLEEPING, wake_started=None, idle_since=None)
        self.state = state

    def apply(self, action, route, targets, models):
        if action.kind == "log":
            LOG.info("%s", action.message)
            return
        if action.kind == "record_wake":
            record = {"replica": action.replica, "seconds": round(action.seconds, 1), "at": time.time()}
            self.wakes.append(record)
            self.metrics.inc("pairserve_controller_wakes_total", model=action.replica)
            self.metrics.set("pairserve_controller_last_wake_seconds", round(action.seconds, 3), model=action.replica)
            LOG.info("cold start of %s took %.1f s", action.replica, action.seconds)
            if self.wake_log and not self.dry_run:
                with open(self.wake_log, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record, sort_keys=True) + "\n")
            return
        prefix = "dry run: would " if self.dry_run else ""
        if action.kind == "set_weights":
            LOG.info("%sset route %s weights %s", prefix, self.route_name,
                     ", ".join("%s=%d" % kv for kv in action.weights.items()))
            if not self.dry_run:
                self.api.set_route_weights(route, targets, action.weights,
                                           dict((m["id"], n) for n, m in models.items()))
                self.metrics.inc("pairserve_controller_weight_updates_total", route=self.route_name)
        elif action.kind == "set_replicas":
            LOG.info("%sset %s replicas=%d", prefix, action.replica, action.replicas)
            if not self.dry_run:
                self.api.set_replicas(models[action.replica]["id"], action.replicas)
                self.metrics.inc("pairserve_controller_replica_scalings_total", model=action.replica,
                                 to=str(action.replicas))
        else:
            raise ValueError("unknown action %r" % (action,))
