#!/usr/bin/env python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pairserve controller: route weights from queued work, and sleep/wake of one replica.

Runs on the GPUStack server node as a systemd service (stdlib only, Python 3.11). Two jobs:

1. Queue-aware weights: every ``interval`` seconds it reads each replica's vLLM ``/metrics``, estimates the
   work queued on it in seconds (queued prompt tokens / prefill tok/s + outstanding output tokens / decode
   tok/s) and sets the GPUStack route weights so that new requests go where they finish first.
2. Sleep/wake: it scales one chosen replica to zero after ``idle_minutes`` without work and scales it back
   when another replica's queue passes a threshold; while that replica is cold its route weight is 0.

The file has three layers: pure logic (parsing, weights, the state machine ``step``) that tests drive with
plain values; an I/O layer (GPUStack REST and vLLM metrics over urllib); and ``main`` (``--once``, loop,
``--dry-run``). ``scripts/simulate_routing.py`` imports the weight function from here by path.

vLLM 0.25.1 and 0.27.1 (read in their sources, ``vllm/v1/metrics/loggers.py``) expose the gauges
``vllm:num_requests_waiting`` and ``vllm:num_requests_running``, the counters ``vllm:prompt_tokens_total`` and
``vllm:generation_tokens_total`` (tokens processed) and the histograms ``vllm:request_prompt_tokens`` and
``vllm:request_generation_tokens`` (per finished request). No metric counts the prompt tokens of *waiting*
requests, so the controller estimates them as ``waiting x mean prompt tokens`` of recently finished requests.
"""

from __future__ import annotations

import argparse
import configparser
import dataclasses
import json
import logging
import math
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = logging.getLogger("pairserve_controller")

WARM = "warm"
DRAINING = "draining"
SLEEPING = "sleeping"
WAKING = "waking"
PHASES = (WARM, DRAINING, SLEEPING, WAKING)

# -- vLLM /metrics --------------------------------------------------------------------------------------

_SAMPLE_RE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$')
_LABEL_RE = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _unescape(value):
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def _parse_labels(text, line):
    labels = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _LABEL_RE.match(text, pos)
        if not match:
            raise ValueError("cannot parse the labels of metrics line %r" % line)
        labels[match.group(1)] = _unescape(match.group(2))
        pos = match.end()
    return labels


def parse_prometheus(text):
    """Samples of a Prometheus text exposition: ``{metric name: [(labels dict, float value), ...]}``.

    Comments and blank lines are skipped; ``NaN`` / ``+Inf`` parse as floats. A malformed line raises
    ValueError naming it (a truncated or non-Prometheus answer should not read as an empty queue).
    """
    samples = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE_RE.match(line)
        if not match:
            raise ValueError("not a Prometheus sample line: %r" % line)
        name, _braces, label_text, value = match.group(1), match.group(2), match.group(3), match.group(4)
        labels = _parse_labels(label_text, line) if label_text else {}
        try:
            number = float(value)
        except ValueError:
            raise ValueError("metric %s has a value that is not a number: %r" % (name, value)) from None
        samples.setdefault(name, []).append((labels, number))
    return samples


@dataclasses.dataclass(frozen=True)
class MetricsSnapshot:
    """One replica's vLLM counters and gauges, summed over its engines (data-parallel ranks)."""

    waiting: float = 0.0
    running: float = 0.0
    prompt_tokens_total: float = 0.0
    generation_tokens_total: float = 0.0
    prompt_hist_sum: float = 0.0
    prompt_hist_count: float = 0.0
    generation_hist_sum: float = 0.0
    generation_hist_count: float = 0.0
    kv_cache_usage: float | None = None
    asleep: bool = False


def _total(samples, name, model_name):
    values = [v for labels, v in samples.get(name, ())
              if (model_name is None or labels.get("model_name") in (None, model_name)) and not math.isnan(v)]
    return sum(values), bool(values)


def metrics_snapshot(samples, model_name=None):
    """A MetricsSnapshot from parse_prometheus() output.

    ``model_name`` keeps only samples whose ``model_name`` label matches (vLLM labels every sample with its
    served model name). ValueError when neither queue gauge is present: the URL is not a vLLM server.
    """
    waiting, has_waiting = _total(samples, "vllm:num_requests_waiting", model_name)
    running, has_running = _total(samples, "vllm:num_requests_running", model_name)
    if not (has_waiting or has_running):
        raise ValueError("no vllm:num_requests_waiting / vllm:num_requests_running in the metrics%s: is this "
                         "a vLLM /metrics endpoint?" % (" for model %r" % model_name if model_name else ""))
    kv_values = [v for labels, v in samples.get("vllm:kv_cache_usage_perc", ())
                 if model_name is None or labels.get("model_name") in (None, model_name)]
    # vllm:engine_sleep_state{sleep_state="awake"} is 0 while vLLM sleep mode holds the engine.
    awake = [v for labels, v in samples.get("vllm:engine_sleep_state", ()) if labels.get("sleep_state") == "awake"]
    return MetricsSnapshot(
        waiting=waiting,
        running=running,
        prompt_tokens_total=_total(samples, "vllm:prompt_tokens_total", model_name)[0],
        generation_tokens_total=_total(samples, "vllm:generation_tokens_total", model_name)[0],
        prompt_hist_sum=_total(samples, "vllm:request_prompt_tokens_sum", model_name)[0],
        prompt_hist_count=_total(samples, "vllm:request_prompt_tokens_count", model_name)[0],
        generation_hist_sum=_total(samples, "vllm:request_generation_tokens_sum", model_name)[0],
        generation_hist_count=_total(samples, "vllm:request_generation_tokens_count", model_name)[0],
        kv_cache_usage=max(kv_values) if kv_values else None,
        asleep=bool(awake) and max(awake) == 0,
    )


# -- queued work ----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Speed:
    """Measured speed of one replica (from a bench run): prefill tok/s and aggregate decode tok/s at saturation."""

    prefill_tps: float
    decode_tps: float

    def __post_init__(self):
        if not (self.prefill_tps > 0 and self.decode_tps > 0):
            raise ValueError("speeds must be above 0 tok/s (prefill %r, decode %r)" % (self.prefill_tps, self.decode_tps))


@dataclasses.dataclass(frozen=True)
class Load:
    """Work on one replica now: request counts and token estimates."""

    waiting: float = 0.0
    running: float = 0.0
    queued_prompt_tokens: float = 0.0
    mean_prompt_tokens: float = 0.0
    mean_generation_tokens: float = 0.0

    @property
    def busy(self):
        return self.waiting + self.running > 0


@dataclasses.dataclass
class MeanTracker:
    """Mean prompt/output tokens per request of one replica, from the deltas of vLLM's per-request histograms.

    Each poll blends the mean of the requests finished since the previous poll into an exponential average
    (``alpha``); before any request finished it answers the configured priors.
    """

    prior_prompt: float
    prior_generation: float
    alpha: float = 0.3
    mean_prompt: float | None = None
    mean_generation: float | None = None
    last: MetricsSnapshot | None = None

    def update(self, snap):
        prev = self.last
        self.last = snap
        if prev is None or snap.prompt_hist_count < prev.prompt_hist_count:  # first poll or a restarted server
            prev = MetricsSnapshot()
        finished = snap.prompt_hist_count - prev.prompt_hist_count
        if finished > 0:
            self.mean_prompt = self._blend(self.mean_prompt, (snap.prompt_hist_sum - prev.prompt_hist_sum) / finished)
        finished_gen = snap.generation_hist_count - prev.generation_hist_count
        if finished_gen > 0:
            self.mean_generation = self._blend(
                self.mean_generation, (snap.generation_hist_sum - prev.generation_hist_sum) / finished_gen)
        return self.prompt, self.generation

    def _blend(self, old, new):
        return new if old is None else (1 - self.alpha) * old + self.alpha * new

    @property
    def prompt(self):
        return self.prior_prompt if self.mean_prompt is None else self.mean_prompt

    @property
    def generation(self):
        return self.prior_generation if self.mean_generation is None else self.mean_generation


def load_from_snapshot(snap, mean_prompt, mean_generation):
    """Load of a replica: vLLM has no queued-prompt-token gauge, so waiting x mean prompt tokens stands in."""
    return Load(waiting=snap.waiting, running=snap.running, queued_prompt_tokens=snap.waiting * mean_prompt,
                mean_prompt_tokens=mean_prompt, mean_generation_tokens=mean_generation)


def backlog_seconds(load, speed, running_fraction_left=0.5):
    """Seconds the replica needs to clear its current work.

    Queued prompts at prefill speed, plus output tokens of queued and running requests at aggregate decode
    speed; a running request is assumed ``running_fraction_left`` through its output.
    """
    prefill = load.queued_prompt_tokens / speed.prefill_tps
    outputs = (load.waiting + running_fraction_left * load.running) * load.mean_generation_tokens
    return prefill + outputs / speed.decode_tps


def capacity_rps(speed, mean_prompt, mean_generation):
    """Requests per second a replica finishes at saturation for a mix of this mean shape."""
    cost = mean_prompt / speed.prefill_tps + mean_generation / speed.decode_tps
    if cost <= 0:
        return 1.0 / (1.0 / speed.prefill_tps + 1.0 / speed.decode_tps)
    return 1.0 / cost


# -- weights --------------------------------------------------------------------------------------------

def normalize_weights(raw, names, min_weight=1, max_weight=100):
    """Integer weights summing to 100 from non-negative shares.

    ``names`` is every target in route order; a name missing from ``raw`` (cold) gets 0. Each name in
    ``raw`` gets at least ``min_weight`` and at most ``max_weight`` (bounds that cannot all hold are relaxed
    to an even split), rounding by largest remainder.
    """
    live = [n for n in names if n in raw]
    if not live:
        raise ValueError("no warm target to route to: at least one replica must take requests")
    if any(raw[n] < 0 or math.isnan(raw[n]) for n in live):
        raise ValueError("negative or NaN weight share in %r" % raw)
    lo = max(0.0, float(min_weight))
    hi = min(100.0, float(max_weight))
    if lo * len(live) > 100 or hi * len(live) < 100 or lo > hi:
        lo, hi = 0.0, 100.0
    total = sum(raw[n] for n in live)
    share = {n: (raw[n] / total * 100.0 if total > 0 else 100.0 / len(live)) for n in live}
    fixed = {}
    # Clamp and hand what clamping freed (or took) to the unclamped targets, until nothing moves.
    for _round in range(len(live) + 1):
        free = [n for n in live if n not in fixed]
        budget = 100.0 - sum(fixed.values())
        free_total = sum(share[n] for n in free)
        scaled = {n: (share[n] / free_total * budget if free_total > 0 else budget / len(free)) for n in free}
        newly = {n: min(max(v, lo), hi) for n, v in scaled.items() if v < lo or v > hi}
        if not newly:
            share = dict(fixed, **scaled)
            break
        fixed.update(newly)
        if len(fixed) == len(live):
            share = fixed
            break
    floors = {n: int(math.floor(share[n] + 1e-9)) for n in live}
    short = 100 - sum(floors.values())
    order = sorted(live, key=lambda n: (-(share[n] - floors[n]), live.index(n)))
    for n in order[:short]:
        floors[n] += 1
    return {n: floors.get(n, 0) for n in names}


def static_weights(static, warm, names, min_weight=1, max_weight=100):
    """The configured static weights over the warm targets (a cold target gets 0, the rest rescale)."""
    return normalize_weights({n: float(static.get(n, 0)) for n in names if n in warm}, names, min_weight, max_weight)


def queue_aware_shares(loads, speeds, horizon_s, mean_prompt, mean_generation):
    """Real-valued shares of new requests: fill each replica up to a common finishing time.

    Replica i has backlog T_i seconds and capacity C_i requests/s for the current mix. Assume the next
    ``horizon_s`` seconds bring as much work as all replicas can do in that time (H x sum C). Sending it so
    every replica finishes at the same time T gives share_i = C_i x max(0, T - T_i), with T chosen so the
    shares add up to H x sum C (water filling). With no backlog the shares are the capacity ratio, i.e.
    the measured static split; a replica whose backlog exceeds the others' by more than the horizon gets none.
    """
    names = list(loads)
    cap = {n: capacity_rps(speeds[n], mean_prompt, mean_generation) for n in names}
    back = {n: backlog_seconds(loads[n], speeds[n]) for n in names}
    need = horizon_s * sum(cap.values())
    order = sorted(names, key=lambda n: back[n])
    level = back[order[0]]
    for k in range(1, len(order) + 1):
        group = order[:k]
        c_sum = sum(cap[n] for n in group)
        level = (need + sum(cap[n] * back[n] for n in group)) / c_sum
        if k == len(order) or level <= back[order[k]]:
            break
    return {n: cap[n] * max(0.0, level - back[n]) for n in names}


def queue_aware_weights(loads, speeds, names=None, horizon_s=30.0, min_weight=5, max_weight=95,
                        mean_prompt=None, mean_generation=None):
    """Integer route weights (sum 100) from queued work and measured speed.

    loads: {name: Load} of the warm replicas; speeds: {name: Speed}; names: every route target in order
    (targets not in ``loads`` are cold and get 0). mean_prompt / mean_generation: the request mix; by default
    the request-weighted mean of the replicas' own means.
    """
    names = list(names) if names is not None else list(loads)
    if not loads:
        raise ValueError("no warm replica: nothing to weigh")
    if mean_prompt is None or mean_generation is None:
        mean_prompt = sum(ld.mean_prompt_tokens for ld in loads.values()) / len(loads)
        mean_generation = sum(ld.mean_generation_tokens for ld in loads.values()) / len(loads)
    shares = queue_aware_shares(loads, speeds, horizon_s, mean_prompt, mean_generation)
    return normalize_weights(shares, names, min_weight, max_weight)


def weights_change(current, proposed, min_change):
    """True when ``proposed`` should replace ``current``.

    Always when nothing was applied yet or a target switches between 0 and >0 (a cold/warm change is never
    held back); otherwise only when some weight moves by ``min_change`` points or more (the dead band that
    keeps the route from flapping on noise).
    """
    if current is None or set(current) != set(proposed):
        return True
    for name, weight in proposed.items():
        if (weight > 0) != (current[name] > 0):
            return True
    return max(abs(proposed[n] - current[n]) for n in proposed) >= min_change


# -- state machine --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Policy:
    """Everything ``step`` needs from the configuration."""

    names: tuple
    speeds: dict
    static: dict
    mode: str = "queue_aware"          # or "static"
    min_weight: int = 5
    max_weight: int = 95
    min_change: int = 5
    hold_s: float = 15.0
    horizon_s: float = 30.0
    prior_prompt: float = 2000.0
    prior_generation: float = 300.0
    sleep_enabled: bool = False
    sleeper: str | None = None
    idle_s: float = 1800.0
    wake_waiting: float = 4
    wake_prompt_tokens: float = 100000
    drain_grace_s: float = 30.0
    wake_timeout_s: float = 900.0

    def __post_init__(self):
        if self.mode not in ("queue_aware", "static"):
            raise ValueError("mode %r: use queue_aware or static" % self.mode)
        if len(self.names) < 1:
            raise ValueError("a route needs at least one replica")
        if self.sleep_enabled:
            if self.sleeper not in self.names:
                raise ValueError("sleep replica %r is not one of the route's replicas %s"
                                 % (self.sleeper, ", ".join(self.names)))
            if len(self.names) < 2:
                raise ValueError("sleep needs a second replica to keep serving while the first one sleeps")


@dataclasses.dataclass(frozen=True)
class State:
    phase: str = WARM
    weights: dict | None = None       # last weights applied to the route
    last_weights_at: float | None = None
    idle_since: float | None = None
    drain_since: float | None = None
    wake_started: float | None = None
    wake_timeout_reported: bool = False


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What one tick observed: time (monotonic seconds), each replica's Load (None: metrics unreadable) and
    whether each replica is ready (GPUStack reports a running instance and its metrics answer)."""

    now: float
    loads: dict
    ready: dict


@dataclasses.dataclass(frozen=True)
class Action:
    """kind: set_weights (weights), set_replicas (replica, replicas), record_wake (replica, seconds), log (message)."""

    kind: str
    weights: dict | None = None
    replica: str | None = None
    replicas: int | None = None
    seconds: float | None = None
    message: str | None = None


def wake_pressure(inputs, policy):
    """The reason to wake (or stay awake), or None: another replica's queue over a threshold."""
    for name in policy.names:
        if name == policy.sleeper:
            continue
        load = inputs.loads.get(name)
        if load is None:
            continue
        if load.waiting >= policy.wake_waiting:
            return "%s has %g waiting requests (threshold %g)" % (name, load.waiting, policy.wake_waiting)
        if load.queued_prompt_tokens >= policy.wake_prompt_tokens:
            return "%s has about %d queued prompt tokens (threshold %d)" % (
                name, load.queued_prompt_tokens, policy.wake_prompt_tokens)
    return None


def target_weights(inputs, policy, cold):
    """Weights the mode asks for with ``cold`` replicas at 0."""
    warm = [n for n in policy.names if n not in cold]
    loads = {n: inputs.loads.get(n) for n in warm}
    if policy.mode == "static" or any(v is None for v in loads.values()):
        # Without every warm replica's metrics the queue picture is partial: fall back to the static split.
        return static_weights(policy.static, warm, policy.names, policy.min_weight, policy.max_weight)
    mean_prompt = sum(v.mean_prompt_tokens for v in loads.values()) / len(loads)
    mean_gen = sum(v.mean_generation_tokens for v in loads.values()) / len(loads)
    return queue_aware_weights(loads, {n: policy.speeds[n] for n in warm}, policy.names, policy.horizon_s,
                               policy.min_weight, policy.max_weight, mean_prompt or policy.prior_prompt,
                               mean_gen or policy.prior_generation)


def _weights_actions(state, inputs, policy, cold, force=False):
    """Set the weights the mode asks for, unless the change is inside the dead band or the hold time.

    A change of which targets are cold is applied at once; other changes wait ``hold_s`` after the last one.
    """
    want = target_weights(inputs, policy, cold)
    if state.weights == want:
        return state, []
    held = state.last_weights_at is not None and inputs.now - state.last_weights_at < policy.hold_s
    cold_change = state.weights is None or (
        {n for n, w in want.items() if w > 0} != {n for n, w in state.weights.items() if w > 0})
    if force or cold_change or (not held and weights_change(state.weights, want, policy.min_change)):
        return dataclasses.replace(state, weights=want, last_weights_at=inputs.now), [Action("set_weights", weights=want)]
    return state, []


def step(state, inputs, policy):
    """One tick of the controller: (new State, [Action]) from the old state and what was observed.

    Phases of the sleeping replica (sleep disabled: always warm):
    warm --idle for idle_s, no wake pressure--> draining (weight 0 first: GPUStack answers 503 for a target
    without a running instance, so the route must stop choosing it before it is scaled down)
    draining --its queue empty and drain_grace_s passed--> sleeping (replicas 0)
    draining --wake pressure--> warm (weight restored, nothing was scaled)
    sleeping --wake pressure--> waking (replicas 1)
    waking --ready--> warm (cold start recorded, weight restored)
    """
    actions = []
    sleeper = policy.sleeper if policy.sleep_enabled else None
    phase = state.phase if sleeper else WARM
    pressure = wake_pressure(inputs, policy) if sleeper else None

    if phase == WARM:
        if sleeper:
            load = inputs.loads.get(sleeper)
            idle = load is not None and not load.busy
            if not idle or pressure:
                state = dataclasses.replace(state, idle_since=None)
            elif state.idle_since is None:
                state = dataclasses.replace(state, idle_since=inputs.now)
            elif inputs.now - state.idle_since >= policy.idle_s:
                state = dataclasses.replace(state, phase=DRAINING, drain_since=inputs.now, idle_since=None)
                actions.append(Action("log", message="%s idle for %.0f s: route weight 0, then scale to zero"
                                      % (sleeper, policy.idle_s)))
                state, more = _weights_actions(state, inputs, policy, {sleeper}, force=True)
                return state, actions + more
        state, more = _weights_actions(state, inputs, policy, set())
        return state, actions + more

    if phase == DRAINING:
        if pressure:
            state = dataclasses.replace(state, phase=WARM, drain_since=None, idle_since=None)
            actions.append(Action("log", message="drain of %s cancelled: %s" % (sleeper, pressure)))
            state, more = _weights_actions(state, inputs, policy, set(), force=True)
            return state, actions + more
        load = inputs.loads.get(sleeper)
        empty = load is None or not load.busy
        if empty and inputs.now - state.drain_since >= policy.drain_grace_s:
            state = dataclasses.replace(state, phase=SLEEPING, drain_since=None)
            actions.append(Action("set_replicas", replica=sleeper, replicas=0))
        state, more = _weights_actions(state, inputs, policy, {sleeper})
        return state, actions + more

    if phase == SLEEPING:
        if pressure:
            state = dataclasses.replace(state, phase=WAKING, wake_started=inputs.now, wake_timeout_reported=False)
            actions.append(Action("set_replicas", replica=sleeper, replicas=1))
            actions.append(Action("log", message="waking %s: %s" % (sleeper, pressure)))
        state, more = _weights_actions(state, inputs, policy, {sleeper})
        return state, actions + more

    # WAKING
    if inputs.ready.get(sleeper):
        seconds = inputs.now - state.wake_started
        state = dataclasses.replace(state, phase=WARM, wake_started=None, idle_since=None)
        actions.append(Action("record_wake", replica=sleeper, seconds=seconds))
        state, more = _weights_actions(state, inputs, policy, set(), force=True)
        return state, actions + more
    if inputs.now - state.wake_started > policy.wake_timeout_s and not state.wake_timeout_reported:
        state = dataclasses.replace(state, wake_timeout_reported=True)
        actions.append(Action("log", message="%s is still not ready %.0f s after scaling it up (wake_timeout %g s); "
                                             "check its instance in GPUStack" % (
                                                 sleeper, inputs.now - state.wake_started, policy.wake_timeout_s)))
    state, more = _weights_actions(state, inputs, policy, {sleeper})
    return state, actions + more


def initial_state(sleeper_replicas, sleeper_ready, now):
    """The phase to start in from what GPUStack shows (the service may restart at any time)."""
    if sleeper_replicas == 0:
        return State(phase=SLEEPING)
    if not sleeper_ready:
        # Scaled up but not running: a wake in progress (its recorded duration counts from this start).
        return State(phase=WAKING, wake_started=now)
    return State(phase=WARM)


# -- configuration --------------------------------------------------------------------------------------

def _num(section, key, default, kind=float):
    value = section.get(key, default)
    if value is None:
        return None
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError("config: %s = %r is not a number" % (key, value)) from None


def _bool(value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("config: %r is not a boolean (true/false)" % value)


def read_config(path):
    """A dict {gpustack, controller, sleep, replicas: {name: {...}}} from an INI or a JSON file.

    INI sections: [gpustack], [controller], [sleep], and one [replica NAME] per route target (NAME is the
    GPUStack model name). JSON: the same keys, with "replicas" an object keyed by model name.
    """
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if path.endswith(".json") or text.lstrip().startswith("{"):
        data = json.loads(text)
        return {"gpustack": dict(data.get("gpustack", {})), "controller": dict(data.get("controller", {})),
                "sleep": dict(data.get("sleep", {})),
                "replicas": {k: dict(v) for k, v in (data.get("replicas") or {}).items()}}
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"))
    parser.read_string(text, source=path)
    out = {"gpustack": {}, "controller": {}, "sleep": {}, "replicas": {}}
    for section in parser.sections():
        if section.startswith("replica "):
            out["replicas"][section[len("replica "):].strip()] = dict(parser[section])
        elif section in out and section != "replicas":
            out[section] = dict(parser[section])
        else:
            raise ValueError("config %s: unknown section [%s] (use gpustack, controller, sleep, replica NAME)"
                             % (path, section))
    return out


def policy_from_config(cfg):
    ctl, slp, reps = cfg["controller"], cfg["sleep"], cfg["replicas"]
    if not reps:
        raise ValueError("config: no replicas: add one [replica NAME] section per route target")
    names = tuple(reps)
    speeds, static = {}, {}
    for name, rep in reps.items():
        try:
            speeds[name] = Speed(_num(rep, "prefill_tps", None), _num(rep, "decode_tps", None))
        except (TypeError, ValueError) as err:
            raise ValueError("config: replica %s needs prefill_tps and decode_tps above 0 (from a bench run): %s"
                             % (name, err)) from None
        static[name] = _num(rep, "static_weight", 100 // len(reps))
    return Policy(
        names=names, speeds=speeds, static=static,
        mode=ctl.get("mode", "queue_aware"),
        min_weight=_num(ctl, "min_weight", 5, int), max_weight=_num(ctl, "max_weight", 95, int),
        min_change=_num(ctl, "min_change", 5, int), hold_s=_num(ctl, "hold", 15),
        horizon_s=_num(ctl, "horizon", 30),
        prior_prompt=_num(ctl, "prior_prompt_tokens", 2000), prior_generation=_num(ctl, "prior_generation_tokens", 300),
        sleep_enabled=_bool(slp.get("enabled", False)), sleeper=slp.get("replica"),
        idle_s=_num(slp, "idle_minutes", 30) * 60.0, wake_waiting=_num(slp, "wake_waiting", 4),
        wake_prompt_tokens=_num(slp, "wake_prompt_tokens", 100000), drain_grace_s=_num(slp, "drain_grace", 30),
        wake_timeout_s=_num(slp, "wake_timeout", 900),
    )


KNOWN_KEYS = {
    "gpustack": ("url", "api_key", "api_key_file", "route", "timeout"),
    "controller": ("mode", "interval", "horizon", "min_weight", "max_weight", "min_change", "hold",
                   "prior_prompt_tokens", "prior_generation_tokens", "wake_log", "metrics_address", "metrics_port"),
    "sleep": ("enabled", "replica", "idle_minutes", "wake_waiting", "wake_prompt_tokens", "drain_grace",
              "wake_timeout"),
    "replica": ("prefill_tps", "decode_tps", "static_weight", "metrics_url", "served_model_name"),
}


def check_config(cfg):
    """The Policy of a configuration the service can start with; ValueError naming the first problem.

    Stricter than what ``main`` needs to start: a key no section knows is refused (a misspelt ``idle_minute``
    would otherwise leave the default in force without a word), and so are a missing route, URL or API key,
    bounds that cannot hold and a wake log outside an absolute path. The role runs it as the ``validate``
    step before a new configuration replaces the old one.
    """
    sections = [(name, cfg[name], KNOWN_KEYS[name]) for name in ("gpustack", "controller", "sleep")]
    sections += [("replica %s" % name, rep, KNOWN_KEYS["replica"]) for name, rep in cfg["replicas"].items()]
    for title, section, known in sections:
        unknown = sorted(set(section) - set(known))
        if unknown:
            raise ValueError("config: [%s] has unknown key(s) %s (known: %s)"
                             % (title, ", ".join(unknown), ", ".join(known)))
    policy = policy_from_config(cfg)
    gcfg = cfg["gpustack"]
    if not str(gcfg.get("route") or "").strip():
        raise ValueError("config: [gpustack] route is required (the route name clients call)")
    url = str(gcfg.get("url") or "")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError("config: [gpustack] url = %r is not an http(s) URL of the GPUStack server" % url)
    if not (str(gcfg.get("api_key") or "").strip() or gcfg.get("api_key_file")):
        raise ValueError("config: [gpustack] needs api_key or api_key_file (a GPUStack key with the management "
                         "scope: the route and model PUTs need it)")
    if _num(gcfg, "timeout", 10) <= 0:
        raise ValueError("config: [gpustack] timeout must be above 0 seconds")
    ctl = cfg["controller"]
    for key, default in (("interval", 5), ("horizon", 30)):
        if _num(ctl, key, default) <= 0:
            raise ValueError("config: [controller] %s must be above 0 seconds" % key)
    for key in ("hold", "prior_prompt_tokens", "prior_generation_tokens"):
        if _num(ctl, key, 0) < 0:
            raise ValueError("config: [controller] %s must not be negative" % key)
    if not 0 <= policy.min_weight <= policy.max_weight <= 100:
        raise ValueError("config: [controller] needs 0 <= min_weight (%d) <= max_weight (%d) <= 100"
                         % (policy.min_weight, policy.max_weight))
    if policy.min_change < 1:
        raise ValueError("config: [controller] min_change must be at least 1 weight point")
    port = _num(ctl, "metrics_port", 0, int)
    if not 0 <= port <= 65535:
        raise ValueError("config: [controller] metrics_port must be 0 (off) or a TCP port, got %d" % port)
    wake_log = ctl.get("wake_log")
    if wake_log and not wake_log.startswith("/"):
        raise ValueError("config: [controller] wake_log = %r must be an absolute path" % wake_log)
    if any(w < 0 for w in policy.static.values()) or sum(policy.static.values()) <= 0:
        raise ValueError("config: static_weight values must be >= 0 with at least one above 0 (got %s)"
                         % ", ".join("%s=%g" % kv for kv in policy.static.items()))
    if policy.sleep_enabled:
        for key, value in (("idle_minutes", policy.idle_s), ("wake_waiting", policy.wake_waiting),
                           ("wake_prompt_tokens", policy.wake_prompt_tokens), ("wake_timeout", policy.wake_timeout_s)):
            if value <= 0:
                raise ValueError("config: [sleep] %s must be above 0" % key)
        if policy.drain_grace_s < 0:
            raise ValueError("config: [sleep] drain_grace must not be negative")
    return policy


def describe_policy(policy, cfg):
    """One line saying what a checked configuration will do (what ``--check-config`` prints)."""
    reps = ", ".join("%s (static %g)" % (n, policy.static[n]) for n in policy.names)
    sleep = "sleep off"
    if policy.sleep_enabled:
        sleep = "sleep %s after %g min idle" % (policy.sleeper, policy.idle_s / 60.0)
    return "route %s, mode %s, replicas %s, %s" % (cfg["gpustack"].get("route"), policy.mode, reps, sleep)


# -- its own /metrics ----------------------------------------------------------------------------------

# name: (type, help). Every series the controller exposes; docs/controller.md lists them with what they mean.
EXPOSED = {
    "pairserve_controller_info": ("gauge", "The controller's route and mode (always 1)."),
    "pairserve_controller_ticks_total": ("counter", "Observations that completed (metrics read, decision made)."),
    "pairserve_controller_tick_errors_total": ("counter", "Observations that failed (GPUStack or a replica unreachable)."),
    "pairserve_controller_last_tick_timestamp_seconds": ("gauge", "Unix time of the last completed observation."),
    "pairserve_controller_route_weight": ("gauge", "The weight the controller last set or found on each route target."),
    "pairserve_controller_weight_updates_total": ("counter", "Route weight changes the controller made."),
    "pairserve_controller_replica_ready": ("gauge", "1 when the replica runs and its metrics answered."),
    "pairserve_controller_replica_requests_waiting": ("gauge", "Requests waiting on the replica (vLLM)."),
    "pairserve_controller_replica_requests_running": ("gauge", "Requests running on the replica (vLLM)."),
    "pairserve_controller_replica_asleep": ("gauge", "1 while the sleep replica is scaled to zero."),
    "pairserve_controller_replica_scalings_total": ("counter", "Replica count changes (to=0 sleep, to=1 wake)."),
    "pairserve_controller_wakes_total": ("counter", "Cold starts of the sleep replica that completed."),
    "pairserve_controller_last_wake_seconds": ("gauge", "Seconds the last cold start took, wake to running."),
}


def _label_text(labels):
    if not labels:
        return ""
    return "{%s}" % ",".join('%s="%s"' % (k, str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
                             for k, v in labels)


class Exposition:
    """The controller's decisions as Prometheus text (exposition format 0.0.4); thread-safe, served on /metrics."""

    def __init__(self):
        self._lock = threading.Lock()
        # (name, ((label, value), ...)) -> number; the unlabelled counters start at 0, so a scrape shows them
        self._values = {(name, ()): 0.0 for name in ("pairserve_controller_ticks_total",
                                                     "pairserve_controller_tick_errors_total")}

    def set(self, name, value, **labels):
        with self._lock:
            self._values[(name, tuple(sorted(labels.items())))] = float(value)

    def inc(self, name, by=1, **labels):
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + by

    def value(self, name, **labels):
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))))

    def render(self):
        with self._lock:
            values = dict(self._values)
        lines = []
        for name, (kind, text) in EXPOSED.items():
            series = sorted((labels, v) for (n, labels), v in values.items() if n == name)
            if not series:
                continue
            lines += ["# HELP %s %s" % (name, text), "# TYPE %s %s" % (name, kind)]
            lines += ["%s%s %s" % (name, _label_text(labels), repr(v)) for labels, v in series]
        return "\n".join(lines) + "\n"


def serve_metrics(exposition, address, port):
    """Serve ``exposition`` on http://address:port/metrics from a daemon thread; returns the server (shutdown())."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = exposition.render().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # scrapes every few seconds: not worth a journal line each
            pass

    server = ThreadingHTTPServer((address, int(port)), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


# -- I/O ------------------------------------------------------------------------------------------------

class ApiError(Exception):
    """A failed HTTP call: what was asked and what came back."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


def http(method, url, body=None, headers=None, timeout=10.0):
    """(status, text) of one HTTP call; ApiError on a connection failure or an HTTP error status."""
    data = None
    hdrs = {"Accept": "application/json"}
    hdrs.update(headers or {})
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        hdrs["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # nosec: URLs come from the config
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        text = err.read().decode("utf-8", "replace")[:300]
        raise ApiError("%s %s: HTTP %s: %s" % (method, url, err.code, text.strip() or "(empty body)"),
                       status=err.code) from None
    except (urllib.error.URLError, OSError) as err:
        raise ApiError("%s %s failed: %s" % (method, url, getattr(err, "reason", err))) from None


# The fallback codes of a target parked out of the split (GpuStack.set_route_weights).
PARK_CODES = ("5xx",)


class GpuStack:
    """The few GPUStack 2.2.3 calls the controller needs (the same paths as plugins/module_utils/gpustack.py)."""

    def __init__(self, url, api_key=None, timeout=10.0, http_call=http):
        base = url.rstrip("/")
        if base.endswith("/v2"):
            base = base[:-3]
        self.base = base
        self.api_key = api_key
        self.timeout = timeout
        self._http = http_call
        # Ids of the route targets this controller parked as the route's weight-0 fallback (set_route_weights).
        self.parked = set()

    def call(self, method, path, body=None, params=None):
        url = self.base + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        headers = {"Authorization": "Bearer %s" % self.api_key} if self.api_key else {}
        _status, text = self._http(method, url, body=body, headers=headers, timeout=self.timeout)
        return json.loads(text) if text.strip() else None

    def list(self, path, params=None):
        items, page = [], 1
        while True:
            query = dict(params or {}, page=page, perPage=100)
            data = self.call("GET", path, params=query)
            if isinstance(data, list):
                return data
            chunk = (data or {}).get("items") or []
            items.extend(chunk)
            pages = ((data or {}).get("pagination") or {}).get("totalPage") or 1
            if page >= pages or not chunk:
                return items
            page += 1

    def models_by_name(self):
        return {m["name"]: m for m in self.list("/v2/models") if not m.get("deleted_at")}

    def route(self, name):
        for route in self.list("/v2/model-routes"):
            if route.get("name") == name and not route.get("deleted_at"):
                return route
        raise ApiError("route %r does not exist in GPUStack: create it (pairserve.llm.gpustack_route) first" % name)

    def route_targets(self, route_id):
        return [t for t in self.list("/v2/model-route-targets", {"route_id": route_id})
                if t.get("route_id") == route_id and not t.get("deleted_at")]

    def set_route_weights(self, route, targets, weights_by_model_id):
        """PUT the route with every current target, its id kept (GPUStack recreates targets sent without one)."""
        body_targets = []
        for target in targets:
            item = {"id": target["id"], "model_id": target.get("model_id"),
                    "weight": int(weights_by_model_id.get(target.get("model_id"), target.get("weight", 0)))}
            for key in ("provider_id", "provider_model_name", "fallback_status_codes", "overridden_model_name"):
                if target.get(key) is not None:
                    item[key] = target[key]
            body_targets.append(item)
        # GPUStack 2.3.0 refuses a route whose targets mix positive and 0 weights (HTTP 422); 2.2.3 accepted it.
        # A weight-0 *fallback* target is accepted by both and gets no share of the split, so a cold replica is
        # parked as the route's fallback (on 5xx of the others) when the route has no fallback of its own, as the
        # day-2 plays drain a node; its codes are cleared when its weight comes back.
        for item in body_targets:
            if item["weight"] > 0 and item["id"] in self.parked:
                item["fallback_status_codes"] = None
                self.parked.discard(item["id"])
        zero = [i for i in body_targets if i["weight"] == 0]
        own_fallback = [i for i in body_targets if i.get("fallback_status_codes") and i["id"] not in self.parked]
        if len(zero) == 1 and len(zero) < len(body_targets) and not own_fallback:
            zero[0]["fallback_status_codes"] = list(PARK_CODES)
            self.parked.add(zero[0]["id"])
        return self.call("PUT", "/v2/model-routes/%s" % route["id"], {"name": route["name"], "targets": body_targets})

    def set_replicas(self, model_id, replicas):
        """Read the model and PUT it back with another replica count.

        A GPUStack model PUT validates the whole spec and resets omitted fields to their defaults
        (``distributed_inference_across_workers`` becomes true), so the body is the model as it is. It also
        sets a vLLM-backend model's ``image_name`` to null: the replicas' runner image therefore lives in their
        backend version (pairserve.llm.gpustack_backend_version), which this PUT leaves alone.
        """
        model = self.call("GET", "/v2/models/%s" % model_id)
        body = {k: v for k, v in model.items()
                if k not in ("id", "created_at", "updated_at", "deleted_at", "has_stale_lora_instances")}
        body["replicas"] = int(replicas)
        return self.call("PUT", "/v2/models/%s" % model_id, body)

    def instances(self, model_id):
        return [i for i in self.list("/v2/model-instances", {"model_id": model_id}) if i.get("model_id") == model_id]


def running_instance(instances):
    for inst in instances:
        if inst.get("state") == "running":
            return inst
    return None


def metrics_url_of(instance):
    """http://<worker_ip>:<port>/metrics of a running instance (the vLLM server GPUStack started)."""
    port = instance.get("port") or (instance.get("ports") or [None])[0]
    if not instance.get("worker_ip") or not port:
        return None
    return "http://%s:%s/metrics" % (instance["worker_ip"], port)


class Controller:
    """Drives ``step`` with real observations and carries out its actions (or only logs them: dry_run)."""

    def __init__(self, cfg, api=None, dry_run=False, clock=time.monotonic, http_call=http):
        self.cfg = cfg
        self.policy = policy_from_config(cfg)
        gcfg = cfg["gpustack"]
        key = gcfg.get("api_key")
        if not key and gcfg.get("api_key_file"):
            with open(gcfg["api_key_file"], encoding="utf-8") as handle:
                key = handle.read().strip()
        self.timeout = _num(gcfg, "timeout", 10)
        self.api = api or GpuStack(gcfg.get("url") or "", key, self.timeout, http_call)
        self.route_name = gcfg.get("route")
        if not self.route_name:
            raise ValueError("config: [gpustack] route is required (the route name clients call)")
        self.dry_run = dry_run
        self.clock = clock
        self._http = http_call
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
            raise ApiError("replica model(s) %s are not in GPUStack (it has: %s)"
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
                _status, text = self._http("GET", url, headers={"Accept": "text/plain"}, timeout=self.timeout)
                snap = metrics_snapshot(parse_prometheus(text), rep.get("served_model_name"))
            except (ApiError, ValueError) as err:
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
            raise ApiError("route %r has no target for replica(s) %s" % (self.route_name, ", ".join(unknown)))
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
                self.api.set_route_weights(route, targets, {models[n]["id"]: w for n, w in action.weights.items()})
                self.metrics.inc("pairserve_controller_weight_updates_total", route=self.route_name)
        elif action.kind == "set_replicas":
            LOG.info("%sset %s replicas=%d", prefix, action.replica, action.replicas)
            if not self.dry_run:
                self.api.set_replicas(models[action.replica]["id"], action.replicas)
                self.metrics.inc("pairserve_controller_replica_scalings_total", model=action.replica,
                                 to=str(action.replicas))
        else:
            raise ValueError("unknown action %r" % (action,))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--config", default="/etc/pairserve/controller.ini",
                        help="INI or JSON configuration (default: %(default)s)")
    parser.add_argument("--once", action="store_true", help="run one tick and exit")
    parser.add_argument("--dry-run", action="store_true", help="observe and decide, change nothing")
    parser.add_argument("--interval", type=float, help="seconds between ticks (default: [controller] interval or 5)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--api-key-file", metavar="PATH",
                        help="read the GPUStack API key from PATH instead of the configuration's api_key / "
                             "api_key_file (the systemd unit passes the key file here)")
    parser.add_argument("--check-config", metavar="PATH",
                        help="check the configuration PATH (unknown keys, bounds, route, URL, key), print what it "
                             "would do and exit: 0 usable, 2 not")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(message)s")
    if args.check_config:
        try:
            cfg = read_config(args.check_config)
            policy = check_config(cfg)
        except (OSError, ValueError, configparser.Error) as err:
            print("%s: %s" % (args.check_config, err), file=sys.stderr)
            return 2
        print("%s: ok: %s" % (args.check_config, describe_policy(policy, cfg)))
        return 0
    try:
        cfg = read_config(args.config)
        if args.api_key_file:
            cfg["gpustack"].pop("api_key", None)
            cfg["gpustack"]["api_key_file"] = args.api_key_file
        ctl = Controller(cfg, dry_run=args.dry_run)
    except (OSError, ValueError, ApiError, configparser.Error) as err:
        LOG.error("cannot start: %s", err)
        return 2
    interval = args.interval or _num(cfg["controller"], "interval", 5)
    port = 0 if args.once else _num(cfg["controller"], "metrics_port", 0, int)
    server = None
    if port:
        address = cfg["controller"].get("metrics_address") or "127.0.0.1"
        try:
            server = serve_metrics(ctl.metrics, address, port)
        except OSError as err:
            LOG.error("cannot serve /metrics on %s:%s: %s", address, port, err)
            return 2
        LOG.info("serving /metrics on %s:%s", address, port)
    try:
        return _loop(ctl, args.once, interval)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _loop(ctl, once, interval):
    stop = []
    signal.signal(signal.SIGTERM, lambda _sig, _frm: stop.append(True))
    while True:
        try:
            ctl.tick()
        except (ApiError, ValueError) as err:
            LOG.error("tick failed: %s", err)
            ctl.metrics.inc("pairserve_controller_tick_errors_total")
            if once:
                return 1
        if once or stop:
            return 0
        deadline = time.monotonic() + interval
        while not stop and time.monotonic() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        if stop:
            return 0


if __name__ == "__main__":
    sys.exit(main())
