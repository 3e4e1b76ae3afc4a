#!/usr/bin/env python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Discrete-event simulation of the two-replica route: static weights against queue-aware weights.

    .venv/bin/python scripts/simulate_routing.py                 # print the tables (markdown)
    .venv/bin/python scripts/simulate_routing.py --check         # exit 1 when docs/queue-aware-weights.md differs

Each replica is a vLLM engine with continuous batching: up to ``max_num_seqs`` (8) requests run; every engine
step decodes one token for each running request past its prefill and spends the rest of the
``max_num_batched_tokens`` (8192) budget on prompt chunks (chunked prefill). A step costs the decode time of its
batch plus its prompt tokens at the replica's prefill rate. The route picks a target per request by weighted
random choice, as GPUStack does with its gateway disabled. Queue-aware weights come from the controller's own
``step`` (the package roles/controller/files/pairserve_controller), fed each tick with the Prometheus text a vLLM
server would expose, parsed as the controller parses it (prometheus_client's parser). Calibration and the workload mix are
documented in docs/queue-aware-weights.md.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import heapq
import math
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTROLLER_PATH = os.path.join(ROOT, "roles", "controller", "files")
DOC_PATH = os.path.join(ROOT, "docs", "queue-aware-weights.md")
BEGIN = "<!-- simulate_routing: begin -->"
END = "<!-- simulate_routing: end -->"


def load_controller():
    """The controller's package, imported as the service imports it: beside the collection's module_utils
    (bootstrap links this checkout under .cache/collections)."""
    for path in (os.path.join(ROOT, ".cache", "collections"), CONTROLLER_PATH):
        if path not in sys.path:
            sys.path.insert(0, path)
    from pairserve_controller import policy, vllm_metrics  # pylint: disable=import-outside-toplevel
    from ansible_collections.pairserve.llm.plugins.module_utils import routes  # pylint: disable=import-outside-toplevel
    return policy, vllm_metrics, routes


POLICY, METRICS, ROUTES = load_controller()

# The seed's figures (GPUStack 2.2.3, vLLM 0.25.1, TP=2 per pair, --max-num-seqs 8, --max-num-batched-tokens 8192).
SEED = {
    "node-a": {"label": "node A, 2x RTX 5080", "single": 64.9, "saturation": 275.0, "conc8": 244.0,
               "prefill": 2767.0},
    "node-b": {"label": "node B, 2x RTX 4070 Ti SUPER", "single": 48.1, "saturation": 220.0, "conc8": 177.0,
               "prefill": 1823.0},
}
SEED_WEIGHTS = {"node-a": 58, "node-b": 42}
WRONG_WEIGHTS = {"node-a": 30, "node-b": 70}
MAX_SEQS = 8
MAX_BATCHED = 8192
SEED_16K_SECONDS = 6.1  # a ~16K agent context without prefix cache on the 5080 pair

# Workload (assumptions, see the doc): kind -> (share of requests, prompt tokens range, output tokens range).
MIX = {
    "agent": (0.10, (50000, 90000), (1000, 3000)),
    "image": (0.90, (2500, 4000), (100, 300)),
}


# -- one replica ------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Request:
    rid: int
    kind: str
    prompt: int
    output: int
    arrival: float
    client: int | None = None
    replica: str | None = None
    prefill_left: int = 0
    output_left: int = 0
    first_token: float | None = None
    done: float | None = None

    def __post_init__(self):
        self.prefill_left = self.prompt
        self.output_left = self.output


@dataclasses.dataclass
class Step:
    start: float
    dt: float
    k: int
    decoders: list
    chunks: list


class Replica:
    """A vLLM engine: FCFS waiting queue, ``max_seqs`` running slots, chunked prefill, batched decode."""

    def __init__(self, name, prefill_tps, single_tps, saturation_tps, max_seqs=MAX_SEQS, max_batched=MAX_BATCHED):
        self.name = name
        self.prefill_tps = prefill_tps
        self.single_tps = single_tps
        self.max_seqs = max_seqs
        self.max_batched = max_batched
        # Aggregate decode rate R(n) = n*r1 / (1 + a(n-1)), a chosen so that R(max_seqs) is the saturation figure.
        self.alpha = (max_seqs * single_tps / saturation_tps - 1.0) / (max_seqs - 1)
        self.waiting = collections.deque()
        self.running = []
        self.step = None
        self.version = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.prompt_hist = [0, 0]       # sum, count of finished requests
        self.generation_hist = [0, 0]
        self.window_tokens = 0
        self.window_start = 0.0
        self.served = 0

    def decode_step_seconds(self, n):
        return (1.0 + self.alpha * (n - 1)) / self.single_tps

    def aggregate_decode_tps(self, n):
        return n / self.decode_step_seconds(n)

    def start_step(self, now):
        """Compose the next engine step at ``now``; returns its end time or None when idle."""
        while self.waiting and len(self.running) < self.max_seqs:
            self.running.append(self.waiting.popleft())
        if not self.running:
            self.step = None
            return None
        decoders = [r for r in self.running if r.prefill_left == 0]
        budget = self.max_batched - len(decoders)
        chunks = []
        for req in self.running:
            if req.prefill_left > 0 and budget > 0:
                take = min(budget, req.prefill_left)
                chunks.append((req, take))
                budget -= take
        dt = (self.decode_step_seconds(len(decoders)) if decoders else 0.0) + \
            sum(c for _r, c in chunks) / self.prefill_tps
        # A pure decode batch repeats unchanged until a request finishes: one event for all those steps.
        k = 1 if chunks else min(r.output_left for r in decoders)
        self.step = Step(now, dt, k, decoders, chunks)
        self.version += 1
        return now + dt * k

    def truncate(self, now):
        """Cut a multi-step decode run at the first step boundary at or after ``now`` (so that a request
        arriving now is admitted at the next step, as vLLM does). Returns the new end time or None."""
        st = self.step
        if st is None or st.k <= 1:
            return None
        done = max(1, math.ceil((now - st.start) / st.dt - 1e-9))
        if done >= st.k:
            return None
        st.k = done
        self.version += 1
        return st.start + st.dt * st.k

    def _in_window(self, st, per_step, last_step_extra, steps):
        """Output tokens of the first ``steps`` steps of ``st`` that end at or after ``window_start``."""
        first = max(1, math.ceil((self.window_start - st.start) / st.dt - 1e-9)) if st.dt > 0 else 1
        counted = max(0, steps - first + 1)
        return counted * per_step + (last_step_extra if counted and steps == st.k else 0)

    def credit_until(self, when):
        """At the end of a closed-loop run: count the whole steps of the running step finished by ``when``."""
        st = self.step
        if st is None or st.k <= 1 or st.dt <= 0:
            return
        done = min(st.k - 1, int((when - st.start) / st.dt))
        if done > 0:
            self.window_tokens += self._in_window(st, len(st.decoders), 0, done)

    def finish_step(self, now):
        """Apply the step that ends at ``now``; returns the finished requests."""
        st = self.step
        tokens = 0
        for req in st.decoders:
            req.output_left -= st.k
            tokens += st.k
        for req, take in st.chunks:
            req.prefill_left -= take
            self.prompt_tokens_total += take
            if req.prefill_left == 0:
                req.first_token = now
                req.output_left -= 1
                tokens += 1
        self.generation_tokens_total += tokens
        self.window_tokens += self._in_window(st, len(st.decoders), tokens - st.k * len(st.decoders), st.k)
        finished = [r for r in self.running if r.output_left <= 0]
        if finished:
            self.running = [r for r in self.running if r.output_left > 0]
            for req in finished:
                req.done = now
                self.prompt_hist[0] += req.prompt
                self.prompt_hist[1] += 1
                self.generation_hist[0] += req.output
                self.generation_hist[1] += 1
                self.served += 1
        self.step = None
        return finished

    def metrics_text(self, model_name="qwen"):
        """What this engine's /metrics would show (the subset the controller reads), in Prometheus text."""
        lab = '{engine="0",model_name="%s"}' % model_name
        rows = [
            ("vllm:num_requests_running", len(self.running)),
            ("vllm:num_requests_waiting", len(self.waiting)),
            ("vllm:prompt_tokens_total", self.prompt_tokens_total),
            ("vllm:generation_tokens_total", self.generation_tokens_total),
            ("vllm:request_prompt_tokens_sum", self.prompt_hist[0]),
            ("vllm:request_prompt_tokens_count", self.prompt_hist[1]),
            ("vllm:request_generation_tokens_sum", self.generation_hist[0]),
            ("vllm:request_generation_tokens_count", self.generation_hist[1]),
        ]
        return "".join("%s%s %s\n" % (name, lab, float(value)) for name, value in rows)

    def exact_queued_prompt_tokens(self):
        return sum(r.prefill_left for r in self.waiting) + sum(r.prefill_left for r in self.running)


def make_replicas(names=None):
    names = names or list(SEED)
    return {n: Replica(n, SEED[n]["prefill"], SEED[n]["single"], SEED[n]["saturation"]) for n in names}


# -- workload -------------------------------------------------------------------------------------------

def draw_request(rng, rid, arrival, mix=None, client=None):
    mix = mix or MIX
    pick = rng.random()
    acc = 0.0
    kind = list(mix)[-1]
    for name, (share, _p, _o) in mix.items():
        acc += share
        if pick < acc:
            kind = name
            break
    _share, (p_lo, p_hi), (o_lo, o_hi) = mix[kind]
    return Request(rid, kind, rng.randint(p_lo, p_hi), rng.randint(o_lo, o_hi), arrival, client=client)


def mix_means(mix=None):
    mix = mix or MIX
    prompt = sum(s * (lo + hi) / 2.0 for s, (lo, hi), _o in mix.values())
    output = sum(s * (lo + hi) / 2.0 for s, _p, (lo, hi) in mix.values())
    return prompt, output


# -- routing policies -----------------------------------------------------------------------------------

class StaticRouting:
    def __init__(self, weights):
        self.weights = dict(weights)

    def tick(self, now, replicas):  # pylint: disable=unused-argument
        return None


class QueueAwareRouting:
    """The controller's ``step`` every ``interval`` s, on the metrics text of each simulated replica.

    ``exact=True`` replaces the estimate (waiting x mean prompt tokens) by the true remaining prompt tokens:
    what a router that counts each request's tokens could see; vLLM's metrics do not offer it.
    """

    def __init__(self, names, initial, interval=5.0, exact=False, **policy):
        mean_p, mean_o = mix_means()
        speeds = {n: POLICY.Speed(SEED[n]["prefill"], SEED[n]["saturation"]) for n in names}
        params = {"mode": "queue_aware", "min_weight": 5, "max_weight": 95, "min_change": 5, "hold_s": 15.0,
                  "horizon_s": 30.0, "prior_prompt": mean_p, "prior_generation": mean_o}
        params.update(policy)
        self.policy = POLICY.Policy(names=tuple(names), speeds=speeds, static=dict(initial), **params)
        self.trackers = {n: POLICY.MeanTracker(mean_p, mean_o) for n in names}
        self.state = POLICY.State(weights=dict(initial))
        self.weights = dict(initial)
        self.interval = interval
        self.exact = exact
        self.changes = 0

    def tick(self, now, replicas):
        loads = {}
        for name, rep in replicas.items():
            snap = METRICS.metrics_snapshot(METRICS.parse_prometheus(rep.metrics_text()))
            mean_p, mean_o = self.trackers[name].update(snap)
            load = POLICY.load_from_snapshot(snap, mean_p, mean_o)
            if self.exact:
                load = dataclasses.replace(load, queued_prompt_tokens=rep.exact_queued_prompt_tokens())
            loads[name] = load
        inputs = POLICY.Inputs(now=now, loads=loads, ready={n: True for n in replicas})
        self.state, actions = POLICY.step(self.state, inputs, self.policy)
        for action in actions:
            if action.kind == "set_weights":
                self.weights = dict(action.weights)
                self.changes += 1
        return self.interval


# -- the event loop -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Result:
    requests: list
    duration: float
    warmup: float
    tokens: dict
    served: dict
    weight_changes: int = 0

    @property
    def throughput(self):
        return sum(self.tokens.values()) / (self.duration - self.warmup)

    def latencies(self, kind=None):
        return sorted(r.done - r.arrival for r in self.requests
                      if r.done is not None and r.arrival >= self.warmup and (kind is None or r.kind == kind))


def percentile(values, pct):
    """Nearest-rank percentile of sorted values (None when empty)."""
    if not values:
        return None
    rank = max(1, math.ceil(pct / 100.0 * len(values)))
    return values[rank - 1]


def simulate(replicas, routing, seed, duration, warmup=None, clients=None, rate=None, mix=None,
             route_seed=None, drain=True, backlog=None):
    """Run one simulation.

    Closed loop with ``clients`` (each sends its next request when the previous one finishes; stops at
    ``duration``), or open loop with Poisson arrivals at ``rate`` requests/s until ``duration`` (then, with
    ``drain``, runs until every request finished). Requests are drawn from per-client (closed) or one (open)
    random stream seeded by ``seed``, so every policy sees the same requests; route choices use their own stream.
    ``backlog``: {replica: [Request]} queued there at time 0, before any routing.
    """
    if (clients is None) == (rate is None):
        raise ValueError("give either clients (closed loop) or rate (open loop)")
    warmup = duration * 0.1 if warmup is None else warmup
    route_rng = random.Random(route_seed if route_seed is not None else seed + 7919)
    for rep in replicas.values():
        rep.window_start = warmup
    events = []
    seq = [0]
    requests = []

    def push(when, kind, payload=None):
        seq[0] += 1
        heapq.heappush(events, (when, seq[0], kind, payload))

    def schedule_step(rep, end):
        if end is not None:
            push(end, "step", (rep.name, rep.version))

    def route(req, now):
        names = [n for n, w in routing.weights.items() if w > 0 and n in replicas]
        weights = [routing.weights[n] for n in names]
        enqueue(req, route_rng.choices(names, weights)[0], now)

    def enqueue(req, name, now):
        req.replica = name
        rep = replicas[name]
        rep.waiting.append(req)
        requests.append(req)
        if rep.step is None:
            schedule_step(rep, rep.start_step(now))
        elif len(rep.running) < rep.max_seqs:
            schedule_step(rep, rep.truncate(now))

    client_rngs = {}
    next_id = [0]

    def new_request(now, client=None, rng=None):
        next_id[0] += 1
        return draw_request(rng, next_id[0], now, mix, client)

    if clients is not None:
        for cid in range(clients):
            client_rngs[cid] = random.Random(seed * 100003 + cid)
            push(0.0, "arrival", new_request(0.0, cid, client_rngs[cid]))
    else:
        arr_rng = random.Random(seed)
        now = 0.0
        while True:
            now += arr_rng.expovariate(rate)
            if now > duration:
                break
            push(now, "arrival", new_request(now, None, arr_rng))
    for name, reqs in (backlog or {}).items():
        for req in reqs:
            enqueue(req, name, 0.0)
    push(duration, "boundary")
    first_tick = routing.tick(0.0, replicas)
    if first_tick:
        push(first_tick, "tick")

    while events:
        now, _seq, kind, payload = heapq.heappop(events)
        if clients is not None and now > duration:
            for rep in replicas.values():
                rep.credit_until(duration)
            break
        if kind == "arrival":
            route(payload, now)
        elif kind == "step":
            name, version = payload
            rep = replicas[name]
            if rep.step is None or version != rep.version:
                continue  # superseded by a truncation
            for req in rep.finish_step(now):
                if req.client is not None and now < duration:
                    push(now, "arrival", new_request(now, req.client, client_rngs[req.client]))
            schedule_step(rep, rep.start_step(now))
        elif kind == "tick":
            if now <= duration or any(r.step for r in replicas.values()):
                nxt = routing.tick(now, replicas)
                if nxt and (now < duration or drain):
                    push(now + nxt, "tick")
        elif kind == "boundary":
            for rep in replicas.values():
                schedule_step(rep, rep.truncate(now))
        if clients is None and not drain and now > duration:
            break
    tokens = {n: r.window_tokens for n, r in replicas.items()}
    served = {n: r.served for n, r in replicas.items()}
    return Result(requests, duration, warmup, tokens, served, getattr(routing, "changes", 0))


# -- experiments ----------------------------------------------------------------------------------------

def solo_throughput(name, seed, duration, clients=MAX_SEQS, mix=None):
    """Output tok/s of one replica alone under ``clients`` closed-loop clients (a bench run)."""
    reps = make_replicas([name])
    res = simulate(reps, StaticRouting({name: 100}), seed, duration, clients=clients, mix=mix)
    return res.throughput


def measured_weights(seed, duration, mix=None):
    """Static weights from solo bench runs of each replica on this mix (what an operator would measure)."""
    tps = {n: solo_throughput(n, seed, duration, mix=mix) for n in SEED}
    return ROUTES.bounded_weights(tps, list(SEED), 1, 99), tps


def seed_shape_mix(ratio, output=400):
    """A production-shaped text mix with prompt/output token ratio ``ratio`` (the seed does not publish one)."""
    lo, hi = int(output * 0.5), int(output * 1.5)
    return {"text": (1.0, (int(lo * ratio), int(hi * ratio)), (lo, hi))}


def calibrate(seed, duration):
    """Model figures beside the seed's: single stream, saturation, 16K prefill, concurrency-8 at a fitted shape."""
    reps = make_replicas()
    best = None
    for tenth in range(2, 41, 2):
        ratio = tenth / 10.0
        got = {n: solo_throughput(n, seed, duration, mix=seed_shape_mix(ratio)) for n in SEED}
        err = sum(((got[n] - SEED[n]["conc8"]) / SEED[n]["conc8"]) ** 2 for n in SEED)
        if best is None or err < best[0]:
            best = (err, ratio, got)
    _err, ratio, got = best
    pair = simulate(make_replicas(), StaticRouting(SEED_WEIGHTS), seed, duration, clients=2 * MAX_SEQS,
                    mix=seed_shape_mix(ratio))
    rows = []
    for n in SEED:
        rep = reps[n]
        rows.append((SEED[n]["label"], rep.aggregate_decode_tps(1), SEED[n]["single"],
                     rep.aggregate_decode_tps(MAX_SEQS), SEED[n]["saturation"], 16384 / rep.prefill_tps,
                     SEED[n]["conc8"], got[n]))
    return {"rows": rows, "ratio": ratio, "pair": pair.throughput, "pair_split": pair.served}


def policies(seed, duration):
    weights_b, solo = measured_weights(seed, duration)
    names = list(SEED)
    return solo, [
        ("(a) static 58/42 (seed)", lambda: StaticRouting(SEED_WEIGHTS)),
        ("(b) measured static %d/%d" % (weights_b["node-a"], weights_b["node-b"]), lambda: StaticRouting(weights_b)),
        ("(c) queue-aware, vLLM metrics", lambda: QueueAwareRouting(names, SEED_WEIGHTS)),
        ("(c') queue-aware, exact queued tokens", lambda: QueueAwareRouting(names, SEED_WEIGHTS, exact=True)),
        ("(d) control: wrong static 30/70", lambda: StaticRouting(WRONG_WEIGHTS)),
    ]


def fmt(value, digits=1):
    return "n/a" if value is None else "%.*f" % (digits, value)


def _p95(res, kind=None):
    return fmt(percentile(res.latencies(kind), 95))


def run_all(seed, duration, loads=(0.5, 0.8), sweep=5):
    cal = calibrate(seed, min(duration, 1800.0))
    solo, pols = policies(seed, duration)
    ceiling = sum(solo.values())
    _mean_p, mean_o = mix_means()
    rates = [load * ceiling / mean_o for load in loads]
    out = ["Simulated with `scripts/simulate_routing.py --seed %d --duration %g` (simulated seconds per run; "
           "the first 10%% is warm-up and not counted)." % (seed, duration), ""]
    out += ["Calibration (model against the seed; the concurrency-8 column uses a text mix whose prompt:output "
            "ratio was fitted to %.1f):" % cal["ratio"], ""]
    out.append("| replica | 1 stream tok/s (seed) | 8 seqs tok/s (seed) | 16K prefill s | conc-8 tok/s model (seed) |")
    out.append("|---|---|---|---|---|")
    for label, one, one_s, sat, sat_s, pre16, c8_s, c8 in cal["rows"]:
        out.append("| %s | %s (%s) | %s (%s) | %s | %s (%s) |" % (
            label, fmt(one), fmt(one_s), fmt(sat), fmt(sat_s), fmt(pre16, 2), fmt(c8), fmt(c8_s)))
    out += ["", "Both pairs behind one route at 58/42, 16 clients, same fitted mix: %s tok/s aggregate "
            "(seed: 244 + 177 = 421 from two separate concurrency-8 runs); requests served A/B %d/%d."
            % (fmt(cal["pair"]), cal["pair_split"]["node-a"], cal["pair_split"]["node-b"]), ""]
    out += ["Mixed workload: %d%% agent requests (%d-%dK prompt tokens, %d-%d output tokens), %d%% image "
            "descriptions (%d-%d prompt tokens, %d-%d output tokens). Each replica alone with 8 clients: "
            "A %s tok/s, B %s tok/s, sum %s tok/s (the mix's ceiling for the pair)." % (
                round(MIX["agent"][0] * 100), MIX["agent"][1][0] // 1000, MIX["agent"][1][1] // 1000,
                MIX["agent"][2][0], MIX["agent"][2][1], round(MIX["image"][0] * 100), MIX["image"][1][0],
                MIX["image"][1][1], MIX["image"][2][0], MIX["image"][2][1],
                fmt(solo["node-a"]), fmt(solo["node-b"]), fmt(ceiling)), ""]
    out += ["Closed loop, 16 clients (8 per replica on average, the seed's operating point):", ""]
    out.append("| policy | output tok/s | % of sum | p95 latency s | requests A/B | weight changes |")
    out.append("|---|---|---|---|---|---|")
    opened = {}
    for label, make in pols:
        res = simulate(make_replicas(), make(), seed, duration, clients=2 * MAX_SEQS)
        out.append("| %s | %s | %s | %s | %d/%d | %d |" % (
            label, fmt(res.throughput), fmt(100.0 * res.throughput / ceiling), _p95(res),
            res.served["node-a"], res.served["node-b"], res.weight_changes))
        opened[label] = [simulate(make_replicas(), make(), seed, duration, rate=rate) for rate in rates]
    out += ["", "Open loop, Poisson arrivals at %s of that sum (%s requests/s); p95 latency in seconds, "
            "all / image / agent:" % (" and ".join("%d%%" % round(x * 100) for x in loads),
                                      " and ".join("%.3f" % r for r in rates)), ""]
    heads = ["load %d%%: p95 all / image / agent | share to A %%" % round(x * 100) for x in loads]
    out.append("| policy | %s |" % " | ".join(heads))
    out.append("|---|%s" % ("---|---|" * len(loads)))
    for label, _make in pols:
        cells = []
        for res in opened[label]:
            total = sum(res.served.values())
            cells.append("%s / %s / %s" % (_p95(res), _p95(res, "image"), _p95(res, "agent")))
            cells.append(fmt(100.0 * res.served["node-a"] / total if total else None))
        out.append("| %s | %s |" % (label, " | ".join(cells)))
    if sweep:
        out += ["", "Seeds %d to %d, (a) static 58/42 against (c) queue-aware on vLLM metrics: closed-loop output "
                "tok/s and open-loop p95 at load %d%%:" % (seed, seed + sweep - 1, round(loads[-1] * 100)), ""]
        out.append("| seed | closed tok/s (a) | closed tok/s (c) | open p95 s (a) | open p95 s (c) |")
        out.append("|---|---|---|---|---|")
        for sd in range(seed, seed + sweep):
            row = [str(sd)]
            for kind in ("closed", "open"):
                for make in (pols[0][1], pols[2][1]):
                    if kind == "closed":
                        row.append(fmt(simulate(make_replicas(), make(), sd, duration, clients=2 * MAX_SEQS).throughput))
                    else:
                        row.append(_p95(simulate(make_replicas(), make(), sd, duration, rate=rates[-1])))
            out.append("| %s |" % " | ".join(row))
        out += ["", "Controller settings (c), seed %d: closed-loop output tok/s, open-loop p95 at load %d%%, weight "
                "changes in the open-loop run:" % (seed, round(loads[-1] * 100)), ""]
        out.append("| interval s | horizon s | min change | hold s | closed tok/s | open p95 s | weight changes |")
        out.append("|---|---|---|---|---|---|---|")
        names = list(SEED)
        for interval, horizon, min_change, hold in ((5, 30, 5, 15), (5, 10, 5, 15), (5, 120, 5, 15),
                                                    (5, 30, 15, 15), (15, 30, 5, 30), (30, 30, 10, 60)):
            def make_qa(interval=interval, horizon=horizon, min_change=min_change, hold=hold):
                return QueueAwareRouting(names, SEED_WEIGHTS, interval=interval, horizon_s=horizon,
                                         min_change=min_change, hold_s=hold)
            closed = simulate(make_replicas(), make_qa(), seed, duration, clients=2 * MAX_SEQS)
            opn = simulate(make_replicas(), make_qa(), seed, duration, rate=rates[-1])
            out.append("| %d | %d | %d | %d | %s | %s | %d |" % (
                interval, horizon, min_change, hold, fmt(closed.throughput), _p95(opn), opn.weight_changes))
    return "\n".join(out) + "\n"


def doc_block(path=None):
    """The generated part of the doc (between BEGIN and END), or None when the markers are missing."""
    with open(path or DOC_PATH, encoding="utf-8") as handle:
        text = handle.read()
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: %(default)s)")
    parser.add_argument("--duration", type=float, default=7200.0,
                        help="simulated seconds per run (default: %(default)s)")
    parser.add_argument("--sweep", type=int, default=5, help="seeds in the robustness table (0: none)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the tables differ from the block in docs/queue-aware-weights.md")
    args = parser.parse_args(argv)
    table = run_all(args.seed, args.duration, sweep=args.sweep)
    if args.check:
        current = doc_block()
        if current != table:
            sys.stdout.write(table)
            sys.stderr.write("docs/queue-aware-weights.md: the table between %r and %r differs from this run; "
                             "paste the output above there\n" % (BEGIN, END))
            return 1
        sys.stdout.write("docs/queue-aware-weights.md is up to date\n")
        return 0
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
