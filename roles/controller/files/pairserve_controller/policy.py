# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's decisions, as pure functions of what it observed: queued work, weights, the sleep cycle.

Nothing here reads a clock or a socket: tests drive ``step`` with plain values. The rounding of weights and the
drain rule are the collection's (``module_utils/routes.py``), so the controller, the route role and the
maintenance plays round and park the same way.
"""

from __future__ import annotations

import dataclasses

from ansible_collections.pairserve.llm.plugins.module_utils.routes import bounded_weights

WARM = "warm"
DRAINING = "draining"
SLEEPING = "sleeping"
WAKING = "waking"
PHASES = (WARM, DRAINING, SLEEPING, WAKING)


# -- queued work ----------------------------------------------------------------------------------------

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

def static_weights(static, warm, names, min_weight=1, max_weight=100):
    """The configured static weights over the warm targets (a cold target gets 0, the rest rescale)."""
    return bounded_weights(dict((n, float(static.get(n, 0))) for n in names if n in warm), names, min_weight,
                           max_weight)


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
    return bounded_weights(shares, names, min_weight, max_weight)


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
