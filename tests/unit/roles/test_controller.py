# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests of the controller package (roles/controller/files/pairserve_controller): parsing, weights, the state machine, and its I/O
against a recording GPUStack + vLLM stand-in served on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from pairserve_controller import cli, config, exposition, gpustack_access, service
from pairserve_controller import policy as pp
from pairserve_controller import vllm_metrics as vmetrics
from support.controller_ini import REPLICA_SECTIONS

Load = pp.Load
Speed = pp.Speed
SPEEDS = {"qwen-node-a": Speed(2767, 275), "qwen-node-b": Speed(1823, 220)}
NAMES = ("qwen-node-a", "qwen-node-b")


def vllm_metrics(waiting=0, running=0, prompt_sum=0, prompt_count=0, gen_sum=0, gen_count=0, model="qwen",
                 engines=1, awake=1):
    """/metrics text shaped like vLLM 0.25.1's (names from vllm/v1/metrics/loggers.py, prometheus_client
    rendering: counters with _total and _created, histograms with _bucket/_sum/_count). Values split over engines."""
    out = []
    for eng in range(engines):
        lab = 'engine="%d",model_name="%s"' % (eng, model)
        share = 1.0 / engines
        out += [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            "vllm:num_requests_running{%s} %s" % (lab, running * share),
            "vllm:num_requests_waiting{%s} %s" % (lab, waiting * share),
            'vllm:num_requests_waiting_by_reason{%s,reason="capacity"} %s' % (lab, waiting * share),
            'vllm:engine_sleep_state{%s,sleep_state="awake"} %s' % (lab, awake),
            'vllm:engine_sleep_state{%s,sleep_state="weights_offloaded"} %s' % (lab, 1 - awake),
            "vllm:kv_cache_usage_perc{%s} 0.25" % lab,
            "# TYPE vllm:prompt_tokens counter",
            "vllm:prompt_tokens_total{%s} %s" % (lab, 123456.0 * share),
            "vllm:prompt_tokens_created{%s} 1.7e+09" % lab,
            "vllm:generation_tokens_total{%s} %s" % (lab, 4567.0 * share),
            'vllm:request_prompt_tokens_bucket{%s,le="1.0"} 0.0' % lab,
            'vllm:request_prompt_tokens_bucket{%s,le="+Inf"} %s' % (lab, prompt_count * share),
            "vllm:request_prompt_tokens_sum{%s} %s" % (lab, prompt_sum * share),
            "vllm:request_prompt_tokens_count{%s} %s" % (lab, prompt_count * share),
            "vllm:request_generation_tokens_sum{%s} %s" % (lab, gen_sum * share),
            "vllm:request_generation_tokens_count{%s} %s" % (lab, gen_count * share),
        ]
    out.append("python_gc_objects_collected_total{generation=\"0\"} 1234.0")
    return "\n".join(out) + "\n"


# -- parsing --------------------------------------------------------------------------------------------

def test_parse_prometheus_labels_escapes_and_special_values():
    text = ('# HELP x y\nm{a="1",b="q\\"uote, comma"} 3.5\nm{a="2"} NaN\nn +Inf 1700000000\n'
            'vllm:x_total 7\n\n')
    samples = vmetrics.parse_prometheus(text)
    assert samples["m"][0] == ({"a": "1", "b": 'q"uote, comma'}, 3.5)
    assert samples["m"][1][0] == {"a": "2"} and samples["m"][1][1] != samples["m"][1][1]  # NaN
    assert samples["n"] == [({}, float("inf"))]
    assert samples["vllm:x_total"] == [({}, 7.0)]


# prometheus_client's parser takes "m 2 3 4" (a value and a timestamp it does not check): not a case for us.
@pytest.mark.parametrize("line", ["m{a=1} 2", "m{a=\"1\"} twelve", "{a=\"1\"} 2"])
def test_parse_prometheus_rejects_malformed_lines(line):
    with pytest.raises(ValueError, match="m|not a"):
        vmetrics.parse_prometheus(line + "\n")


@pytest.mark.parametrize("kwargs, engines, model, expect", [
    (dict(waiting=3, running=8, prompt_sum=70000, prompt_count=10, gen_sum=3000, gen_count=10), 1, None,
     dict(waiting=3, running=8, prompt_hist_sum=70000, prompt_hist_count=10, generation_hist_count=10)),
    (dict(waiting=4, running=6, prompt_sum=1000, prompt_count=2), 2, None,
     dict(waiting=4, running=6, prompt_hist_sum=1000, prompt_hist_count=2, prompt_tokens_total=123456)),
    (dict(waiting=2, running=1), 1, "qwen", dict(waiting=2, running=1, generation_tokens_total=4567)),
])
def test_metrics_snapshot_sums_engines(kwargs, engines, model, expect):
    snap = vmetrics.metrics_snapshot(vmetrics.parse_prometheus(vllm_metrics(engines=engines, **kwargs)), model)
    for key, value in expect.items():
        assert getattr(snap, key) == pytest.approx(value), key
    assert snap.kv_cache_usage == pytest.approx(0.25)
    assert snap.asleep is False


def test_metrics_snapshot_filters_model_and_reads_sleep_state():
    text = vllm_metrics(waiting=5, model="other") + vllm_metrics(waiting=1, model="qwen", awake=0).replace(
        "python_gc", "python_gc2")
    assert vmetrics.metrics_snapshot(vmetrics.parse_prometheus(text), "qwen").waiting == 1
    assert vmetrics.metrics_snapshot(vmetrics.parse_prometheus(text)).waiting == 6
    assert vmetrics.metrics_snapshot(vmetrics.parse_prometheus(vllm_metrics(awake=0))).asleep is True


def test_metrics_snapshot_refuses_text_without_vllm_gauges():
    with pytest.raises(ValueError, match="vLLM /metrics"):
        vmetrics.metrics_snapshot(vmetrics.parse_prometheus("process_cpu_seconds_total 3\n"))


def test_mean_tracker_uses_histogram_deltas_priors_and_survives_restart():
    tracker = pp.MeanTracker(prior_prompt=2000, prior_generation=300, alpha=0.5)

    def snap(ps, pc, gs, gc):
        return pp.MetricsSnapshot(prompt_hist_sum=ps, prompt_hist_count=pc, generation_hist_sum=gs,
                                  generation_hist_count=gc)

    assert tracker.update(snap(0, 0, 0, 0)) == (2000, 300)            # nothing finished yet: priors
    assert tracker.update(snap(70000, 1, 2000, 1)) == (70000, 2000)   # first finished request
    assert tracker.update(snap(76000, 3, 2400, 3)) == (36500, 1100)   # delta mean 3000 / 200, blended 50/50
    assert tracker.update(snap(76000, 3, 2400, 3)) == (36500, 1100)   # no new request: unchanged
    assert tracker.update(snap(1000, 1, 100, 1)) == (18750, 600)      # counters went back: server restarted


def test_load_estimates_queued_prompt_tokens_from_waiting():
    snap = pp.MetricsSnapshot(waiting=3, running=2)
    load = pp.load_from_snapshot(snap, 20000, 500)
    assert load == Load(waiting=3, running=2, queued_prompt_tokens=60000, mean_prompt_tokens=20000,
                        mean_generation_tokens=500)
    assert load.busy and not Load().busy


# -- weights --------------------------------------------------------------------------------------------

def _loads(a=None, b=None):
    base = dict(mean_prompt_tokens=2000, mean_generation_tokens=300)
    return {"qwen-node-a": Load(**dict(base, **(a or {}))), "qwen-node-b": Load(**dict(base, **(b or {})))}


def test_queue_aware_without_backlog_is_the_capacity_split():
    # Mix 2000 prompt / 300 output tokens: 1/(2000/2767+300/275) = 0.551 req/s vs 0.406 req/s -> 57.6/42.4.
    assert pp.queue_aware_weights(_loads(), SPEEDS) == {"qwen-node-a": 58, "qwen-node-b": 42}
    # A decode-only mix gives the decode ratio 275/220, a prefill-only one the prefill ratio 2767/1823.
    assert pp.queue_aware_weights(_loads(), SPEEDS, mean_prompt=0.001, mean_generation=300) == \
        {"qwen-node-a": 56, "qwen-node-b": 44}
    assert pp.queue_aware_weights(_loads(), SPEEDS, mean_prompt=2000, mean_generation=0.001) == \
        {"qwen-node-a": 60, "qwen-node-b": 40}


def test_queue_aware_moves_work_away_from_the_backlog_monotonically():
    previous = 101
    for queued in (0, 5000, 20000, 40000, 70000, 140000, 280000):
        weights = pp.queue_aware_weights(_loads(a=dict(waiting=queued // 70000, queued_prompt_tokens=queued)), SPEEDS)
        assert sum(weights.values()) == 100
        assert weights["qwen-node-a"] <= previous
        previous = weights["qwen-node-a"]
    assert previous == 5  # floor: a warm replica always keeps min_weight


def test_queue_aware_backlog_on_the_slow_replica_favours_the_fast_one():
    # B: 70000/1823 + (1 + 8/2) * 300/220 = 45.2 s behind; horizon 30 s: common finish at 49.2 s,
    # shares 0.551*49.2 = 27.1 and 0.406*(49.2-45.2) = 1.6 -> 94/6.
    weights = pp.queue_aware_weights(_loads(b=dict(waiting=1, running=8, queued_prompt_tokens=70000)), SPEEDS)
    assert weights == {"qwen-node-a": 94, "qwen-node-b": 6}
    much = pp.queue_aware_weights(_loads(b=dict(waiting=3, running=8, queued_prompt_tokens=210000)), SPEEDS)
    assert much == {"qwen-node-a": 95, "qwen-node-b": 5}  # beyond the horizon: only the floor is left
    half = pp.queue_aware_weights(_loads(b=dict(running=4)), SPEEDS)
    assert 57 < half["qwen-node-a"] < 95


def test_backlog_and_capacity_arithmetic():
    load = Load(waiting=2, running=4, queued_prompt_tokens=27670, mean_generation_tokens=275)
    # 27670/2767 = 10 s of prefill; (2 + 0.5*4) * 275 / 275 = 4 s of decode.
    assert pp.backlog_seconds(load, Speed(2767, 275)) == pytest.approx(14.0)
    assert pp.capacity_rps(Speed(2767, 275), 2767, 275) == pytest.approx(0.5)


def test_queue_aware_shares_water_filling_reaches_equal_finish_times():
    loads = _loads(a=dict(queued_prompt_tokens=27670))  # A: 10 s backlog, B: none
    shares = pp.queue_aware_shares(loads, SPEEDS, 30.0, 2000, 300)
    cap = {n: pp.capacity_rps(SPEEDS[n], 2000, 300) for n in NAMES}
    finish = {n: pp.backlog_seconds(loads[n], SPEEDS[n]) + shares[n] / cap[n] for n in NAMES}
    assert finish["qwen-node-a"] == pytest.approx(finish["qwen-node-b"])
    assert sum(shares.values()) == pytest.approx(30.0 * sum(cap.values()))


@pytest.mark.parametrize("current, proposed, min_change, expect", [
    (None, {"a": 58, "b": 42}, 5, True),
    ({"a": 58, "b": 42}, {"a": 60, "b": 40}, 5, False),
    ({"a": 58, "b": 42}, {"a": 63, "b": 37}, 5, True),
    ({"a": 95, "b": 5}, {"a": 100, "b": 0}, 50, True),   # a target goes cold: never held back
    ({"a": 100, "b": 0}, {"a": 97, "b": 3}, 50, True),   # and warm again
    ({"a": 58, "b": 42}, {"a": 58, "c": 42}, 5, True),
])
def test_weights_change(current, proposed, min_change, expect):
    assert pp.weights_change(current, proposed, min_change) is expect


# -- state machine --------------------------------------------------------------------------------------

def policy(**kw):
    base = dict(names=NAMES, speeds=SPEEDS, static={"qwen-node-a": 58, "qwen-node-b": 42}, mode="queue_aware",
                min_change=5, hold_s=10, sleep_enabled=True, sleeper="qwen-node-b", idle_s=600,
                wake_waiting=4, wake_prompt_tokens=100000, drain_grace_s=30, wake_timeout_s=900)
    base.update(kw)
    return pp.Policy(**base)


IDLE = dict(mean_prompt_tokens=2000, mean_generation_tokens=300)


def inputs(now, a=None, b=None, ready_b=True):
    loads = {"qwen-node-a": Load(**dict(IDLE, **(a or {}))),
             "qwen-node-b": None if b == "down" else Load(**dict(IDLE, **(b or {})))}
    return pp.Inputs(now=now, loads=loads, ready={"qwen-node-a": True, "qwen-node-b": ready_b})


def run(pol, ticks, state=None):
    """Feed ticks through step; returns the states and the actions of every tick."""
    state = state or pp.State(weights={"qwen-node-a": 58, "qwen-node-b": 42})
    trace = []
    for tick in ticks:
        state, actions = pp.step(state, tick, pol)
        trace.append((state, actions))
    return trace


def kinds(actions):
    return [a.kind for a in actions]


def test_idle_sleeper_drains_then_scales_to_zero():
    trace = run(policy(), [inputs(0), inputs(300), inputs(599), inputs(600), inputs(610), inputs(631)])
    phases = [s.phase for s, _a in trace]
    assert phases == ["warm", "warm", "warm", "draining", "draining", "sleeping"]
    state, actions = trace[3]
    weights = [a for a in actions if a.kind == "set_weights"]
    assert weights and weights[0].weights == {"qwen-node-a": 100, "qwen-node-b": 0}  # weight 0 before replicas 0
    assert "set_replicas" not in kinds(actions)
    assert kinds(trace[4][1]) == []  # grace not over yet
    scale = [a for a in trace[5][1] if a.kind == "set_replicas"]
    assert [(a.replica, a.replicas) for a in scale] == [("qwen-node-b", 0)]


def test_busy_sleeper_resets_the_idle_clock_and_disabled_sleep_never_drains():
    trace = run(policy(), [inputs(0), inputs(500, b=dict(running=1)), inputs(700), inputs(1299), inputs(1300)])
    assert [s.phase for s, _a in trace] == ["warm", "warm", "warm", "warm", "draining"]
    trace = run(policy(sleep_enabled=False), [inputs(t) for t in (0, 600, 6000, 60000)])
    assert all(s.phase == "warm" for s, _a in trace)
    assert not any("set_replicas" in kinds(a) for _s, a in trace)


def test_drain_waits_for_in_flight_requests_and_cancels_under_pressure():
    pol = policy()
    state = pp.State(phase="draining", drain_since=0, weights={"qwen-node-a": 100, "qwen-node-b": 0})
    trace = run(pol, [inputs(40, b=dict(running=2)), inputs(50, a=dict(waiting=6))], state)
    assert trace[0][0].phase == "draining" and "set_replicas" not in kinds(trace[0][1])
    state, actions = trace[1]
    assert state.phase == "warm"
    restored = [a.weights for a in actions if a.kind == "set_weights"]
    assert restored and restored[0]["qwen-node-b"] > 0


@pytest.mark.parametrize("pressure", [dict(waiting=4), dict(waiting=1, queued_prompt_tokens=100000)])
def test_sleeping_wakes_on_the_other_replicas_queue_and_records_the_cold_start(pressure):
    pol = policy()
    state = pp.State(phase="sleeping", weights={"qwen-node-a": 100, "qwen-node-b": 0})
    trace = run(pol, [
        inputs(1000, b="down", ready_b=False),                    # quiet: stays asleep
        inputs(1005, a=pressure, b="down", ready_b=False),        # threshold passed: wake
        inputs(1200, a=pressure, b="down", ready_b=False),        # booting: weight stays 0
        inputs(1485.5, a=pressure, ready_b=True),                 # running: record, restore weight
    ], state)
    assert [s.phase for s, _a in trace] == ["sleeping", "waking", "waking", "warm"]
    assert kinds(trace[0][1]) == []
    assert [(a.replica, a.replicas) for a in trace[1][1] if a.kind == "set_replicas"] == [("qwen-node-b", 1)]
    assert not any(a.kind == "set_weights" and a.weights["qwen-node-b"] for _s, acts in trace[:3] for a in acts)
    wake = [a for a in trace[3][1] if a.kind == "record_wake"]
    assert [(a.replica, a.seconds) for a in wake] == [("qwen-node-b", 480.5)]
    assert [a.weights["qwen-node-b"] > 0 for a in trace[3][1] if a.kind == "set_weights"] == [True]


def test_below_threshold_the_sleeper_stays_asleep():
    state = pp.State(phase="sleeping", weights={"qwen-node-a": 100, "qwen-node-b": 0})
    trace = run(policy(), [inputs(t, a=dict(waiting=3, queued_prompt_tokens=99999), b="down", ready_b=False)
                           for t in (0, 100, 1000)], state)
    assert all(s.phase == "sleeping" and not a for s, a in trace)


def test_wake_timeout_is_reported_once():
    state = pp.State(phase="waking", wake_started=0, weights={"qwen-node-a": 100, "qwen-node-b": 0})
    trace = run(policy(), [inputs(t, b="down", ready_b=False) for t in (100, 901, 950, 2000)], state)
    logs = [a.message for _s, acts in trace for a in acts if a.kind == "log"]
    assert len(logs) == 1 and "wake_timeout 900" in logs[0]
    assert all(s.phase == "waking" for s, _a in trace)


def test_hold_time_and_dead_band_limit_route_updates():
    pol = policy(sleep_enabled=False, hold_s=10, min_change=5)
    heavy_a = dict(waiting=2, running=8, queued_prompt_tokens=140000)
    trace = run(pol, [inputs(0), inputs(5, a=heavy_a), inputs(12, a=heavy_a), inputs(14), inputs(25)])
    changes = [(tick, a.weights) for tick, (_s, acts) in zip((0, 5, 12, 14, 25), trace) for a in acts
               if a.kind == "set_weights"]
    # t=0: already 58/42; t=5 applies (A is 57 s behind: 11/89); t=12 same weights; t=14 is within 10 s of
    # t=5: held; t=25 moves back.
    assert [t for t, _w in changes] == [5, 25]
    assert changes[0][1] == {"qwen-node-a": 11, "qwen-node-b": 89}
    assert changes[1][1] == {"qwen-node-a": 58, "qwen-node-b": 42}
    small = run(pol, [inputs(0, a=dict(running=2))])  # 58/42 -> 56/44: inside the dead band of 5
    assert small[0][1] == []


def test_static_mode_and_missing_metrics_fall_back_to_the_static_split():
    pol = policy(sleep_enabled=False, mode="static", static={"qwen-node-a": 70, "qwen-node-b": 30})
    _s, actions = pp.step(pp.State(), inputs(0, a=dict(waiting=50, queued_prompt_tokens=10 ** 6)), pol)
    assert [a.weights for a in actions] == [{"qwen-node-a": 70, "qwen-node-b": 30}]
    pol = policy(sleep_enabled=False, static={"qwen-node-a": 70, "qwen-node-b": 30})
    _s, actions = pp.step(pp.State(), inputs(0, a=dict(waiting=50), b="down"), pol)
    assert [a.weights for a in actions] == [{"qwen-node-a": 70, "qwen-node-b": 30}]


@pytest.mark.parametrize("replicas, ready, phase", [(0, False, "sleeping"), (1, False, "waking"), (1, True, "warm")])
def test_initial_state_from_gpustack(replicas, ready, phase):
    state = pp.initial_state(replicas, ready, 42.0)
    assert state.phase == phase
    assert state.wake_started == (42.0 if phase == "waking" else None)


@pytest.mark.parametrize("kw, match", [
    (dict(mode="fast"), "mode"),
    (dict(sleeper="qwen-node-c"), "not one of"),
    (dict(names=("qwen-node-b",), sleeper="qwen-node-b"), "second replica"),
])
def test_policy_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        policy(**kw)


# -- configuration --------------------------------------------------------------------------------------

INI = """
[gpustack]
url = http://127.0.0.1:{port}
api_key = k3y
route = qwen
timeout = 5

[controller]
mode = queue_aware   ; or static
interval = 5
min_change = 5
hold = 0
wake_log = {wake_log}

[sleep]
enabled = {sleep}
replica = qwen-node-b
idle_minutes = {idle}
wake_waiting = 4
drain_grace = 0

""" + REPLICA_SECTIONS + "metrics_url = auto\n"


def test_read_config_ini_and_json_give_the_same_policy(tmp_path):
    ini = tmp_path / "c.ini"
    ini.write_text(INI.format(port=1, wake_log="", sleep="true", idle=30))
    cfg = config.read_config(str(ini))
    pol = config.policy_from_config(cfg)
    assert pol.names == NAMES and pol.idle_s == 1800 and pol.sleep_enabled and pol.sleeper == "qwen-node-b"
    assert pol.speeds["qwen-node-b"] == Speed(1823, 220) and pol.static == {"qwen-node-a": 58, "qwen-node-b": 42}
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"gpustack": cfg["gpustack"], "controller": cfg["controller"], "sleep": cfg["sleep"],
                              "replicas": cfg["replicas"]}))
    assert config.policy_from_config(config.read_config(str(js))) == pol


@pytest.mark.parametrize("text, match", [
    ("[gpustack]\nroute = q\n[bogus]\n", "unknown section"),
    ("[gpustack]\nroute = q\n", "no replicas"),
    ("[replica a]\nprefill_tps = 100\n", "prefill_tps and decode_tps"),
    ("[replica a]\nprefill_tps = 0\ndecode_tps = 3\n", "above 0"),
    ("[sleep]\nenabled = maybe\n[replica a]\nprefill_tps = 1\ndecode_tps = 1\n", "boolean"),
])
def test_config_errors_name_the_problem(tmp_path, text, match):
    path = tmp_path / "bad.ini"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        config.policy_from_config(config.read_config(str(path)))


# -- I/O against a recording GPUStack + vLLM on 127.0.0.1 -------------------------------------------------

class FakeWorld:
    """GPUStack 2.2.3 answers (paginated lists, route targets with ids) and each instance's vLLM /metrics."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.port = None
        self.metric_ports = {}
        self.models = {
            7: {"id": 7, "name": "qwen-node-a", "replicas": 1, "backend": "vLLM", "backend_version": "0.25.1",
                "distributed_inference_across_workers": False, "cluster_id": 1, "created_at": "x", "updated_at": "y"},
            8: {"id": 8, "name": "qwen-node-b", "replicas": 1, "backend": "vLLM", "backend_version": "0.25.1",
                "distributed_inference_across_workers": False, "cluster_id": 1, "created_at": "x", "updated_at": "y",
                "env": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
        }
        self.route = {"id": 3, "name": "qwen", "description": "pooled"}
        self.targets = [{"id": 11, "route_id": 3, "model_id": 7, "weight": 58, "fallback_status_codes": None},
                        {"id": 12, "route_id": 3, "model_id": 8, "weight": 42, "fallback_status_codes": ["5xx"]}]
        self.metrics = {7: vllm_metrics(), 8: vllm_metrics()}
        self.instance_state = {7: "running", 8: "running"}

    def page(self, items):
        return {"items": items, "pagination": {"page": 1, "perPage": 100, "total": len(items), "totalPage": 1}}

    def handle(self, method, path, query, body):
        with self.lock:
            self.requests.append((method, path, query, body))
            if path == "/v2/models" and method == "GET":
                return 200, self.page(list(self.models.values()))
            if path.startswith("/v2/models/"):
                mid = int(path.rsplit("/", 1)[1])
                if method == "PUT":
                    self.models[mid] = dict(body, id=mid)
                    if body.get("replicas") == 0:
                        self.instance_state[mid] = None
                    elif self.instance_state[mid] is None:
                        self.instance_state[mid] = "starting"
                return 200, self.models[mid]
            if path == "/v2/model-routes" and method == "GET":
                return 200, self.page([self.route])
            if path == "/v2/model-routes/3" and method == "PUT":
                self.targets = [dict(t, route_id=3) for t in body["targets"]]
                return 200, dict(self.route, **{k: v for k, v in body.items() if k != "targets"})
            if path == "/v2/model-route-targets":
                return 200, self.page([t for t in self.targets if str(t["route_id"]) == query["route_id"][0]])
            if path == "/v2/model-instances":
                mid = int(query["model_id"][0])
                state = self.instance_state[mid]
                items = [] if state is None else [{"id": 100 + mid, "model_id": mid, "state": state,
                                                   "worker_ip": "127.0.0.1", "port": self.metric_ports[mid]}]
                return 200, self.page(items)
            if path.startswith("/metrics/"):
                return 200, self.metrics[int(path.rsplit("/", 1)[1])]
            return 404, {"code": 404, "reason": "Not Found", "message": "no route %s %s" % (method, path)}

    def puts(self, prefix):
        return [(p, b) for m, p, _q, b in self.requests if m == "PUT" and p.startswith(prefix)]


@pytest.fixture
def world():
    state = FakeWorld()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            if self.headers.get("Authorization") != "Bearer k3y" and url.path.startswith("/v2"):
                status, payload = 401, {"message": "Invalid authentication credentials"}
            else:
                status, payload = state.handle(self.command, url.path, parse_qs(url.query), body)
            raw = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_PUT = _serve

        def log_message(self, *args):  # keep pytest output clean
            pass

    def metrics_handler(mid):
        class Metrics(BaseHTTPRequestHandler):
            def do_GET(self):  # pylint: disable=invalid-name
                with state.lock:
                    state.requests.append(("GET", "metrics:%d" % mid, {}, None))
                    raw = state.metrics[mid].encode() if self.path == "/metrics" else b"not found"
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass
        return Metrics

    servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler)]
    state.port = servers[0].server_address[1]
    for mid in (7, 8):  # each vLLM instance answers /metrics on its own port, as on a worker
        servers.append(ThreadingHTTPServer(("127.0.0.1", 0), metrics_handler(mid)))
        state.metric_ports[mid] = servers[-1].server_address[1]
    threads = [threading.Thread(target=srv.serve_forever, daemon=True) for srv in servers]
    for thread in threads:
        thread.start()
    yield state
    for srv, thread in zip(servers, threads):
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def make_controller(world, tmp_path, clock, sleep="false", idle=0, dry_run=False, explicit_url=True):
    ini = tmp_path / "controller.ini"
    ini.write_text(INI.format(port=world.port, wake_log=tmp_path / "wakes.jsonl", sleep=sleep, idle=idle))
    cfg = config.read_config(str(ini))
    if explicit_url:
        # Replica A reads a configured URL (here the GPUStack stand-in's /metrics/7); B finds its own (auto).
        cfg["replicas"]["qwen-node-a"]["metrics_url"] = "http://127.0.0.1:%d/metrics/7" % world.port
    return service.Controller(cfg, dry_run=dry_run, clock=lambda: clock[0])


def test_queue_aware_tick_puts_the_route_with_target_ids_and_weights_summing_to_100(world, tmp_path):
    world.metrics[7] = vllm_metrics(waiting=3, running=8, prompt_sum=210000, prompt_count=3, gen_sum=6000,
                                    gen_count=3)
    clock = [1000.0]
    ctrl = make_controller(world, tmp_path, clock)
    actions = ctrl.tick()
    assert ("GET", "metrics:8", {}, None) in world.requests  # auto: http://<worker_ip>:<port>/metrics
    assert [a.kind for a in actions] == ["set_weights"]
    puts = world.puts("/v2/model-routes/")
    assert len(puts) == 1
    path, body = puts[0]
    assert path == "/v2/model-routes/3" and body["name"] == "qwen"
    assert sorted(t["id"] for t in body["targets"]) == [11, 12]
    assert sum(t["weight"] for t in body["targets"]) == 100
    by_model = {t["model_id"]: t for t in body["targets"]}
    assert by_model[7]["weight"] == 5 and by_model[8]["weight"] == 95  # A is 3 x 70K prompts behind
    assert by_model[8]["fallback_status_codes"] == ["5xx"]  # untouched target fields travel back
    # Second tick, nothing changed: no new PUT.
    clock[0] += 30
    assert ctrl.tick() == []
    assert len(world.puts("/v2/model-routes/")) == 1


def test_dry_run_changes_nothing(world, tmp_path):
    world.metrics[7] = vllm_metrics(waiting=6, running=8)
    ctrl = make_controller(world, tmp_path, [0.0], dry_run=True)
    actions = ctrl.tick()
    assert [a.kind for a in actions] == ["set_weights"]
    assert not [r for r in world.requests if r[0] != "GET"]


def test_sleep_and_wake_through_gpustack(world, tmp_path):
    clock = [0.0]
    ctrl = make_controller(world, tmp_path, clock, sleep="true", idle=1)
    assert ctrl.tick() == []                              # starts the idle clock
    clock[0] = 61
    acts = ctrl.tick()                                    # idle 60 s: weight 0 first
    assert "set_weights" in [a.kind for a in acts] and ctrl.state.phase == "draining"
    assert {t["model_id"]: t["weight"] for t in world.targets} == {7: 100, 8: 0}
    clock[0] = 62
    ctrl.tick()                                           # empty and grace 0: scale to zero
    assert ctrl.state.phase == "sleeping"
    (path, body), = world.puts("/v2/models/")
    assert path == "/v2/models/8" and body["replicas"] == 0
    # The whole spec goes back (a model PUT resets omitted fields), without the read-only keys.
    assert body["distributed_inference_across_workers"] is False and body["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert "id" not in body and "created_at" not in body
    clock[0] = 100
    assert ctrl.tick() == [] and ctrl.state.phase == "sleeping"
    world.metrics[7] = vllm_metrics(waiting=5, running=8)
    clock[0] = 105
    ctrl.tick()
    assert ctrl.state.phase == "waking"
    assert world.puts("/v2/models/")[-1][1]["replicas"] == 1
    clock[0] = 200
    ctrl.tick()                                           # instance "starting": still waking, weight 0
    assert ctrl.state.phase == "waking" and {t["model_id"]: t["weight"] for t in world.targets}[8] == 0
    world.instance_state[8] = "running"
    clock[0] = 517.5
    acts = ctrl.tick()
    assert ctrl.state.phase == "warm"
    assert [a.seconds for a in acts if a.kind == "record_wake"] == [412.5]
    assert {t["model_id"]: t["weight"] for t in world.targets}[8] > 0
    assert sorted(t["id"] for t in world.targets) == [11, 12]  # ids survived every PUT
    lines = (tmp_path / "wakes.jsonl").read_text().splitlines()
    assert [json.loads(x)["seconds"] for x in lines] == [412.5]


def test_restart_while_asleep_starts_in_the_sleeping_phase(world, tmp_path):
    world.models[8]["replicas"] = 0
    world.instance_state[8] = None
    world.targets[0]["weight"], world.targets[1]["weight"] = 100, 0
    ctrl = make_controller(world, tmp_path, [0.0], sleep="true", idle=1)
    assert ctrl.tick() == []
    assert ctrl.state.phase == "sleeping"
    assert not world.puts("/v2/")


def test_unknown_route_and_wrong_key_are_reported(world, tmp_path):
    ctrl = make_controller(world, tmp_path, [0.0])
    ctrl.route_name = "nope"
    with pytest.raises(gpustack_access.GpuStackError, match="route 'nope' does not exist"):
        ctrl.tick()
    ctrl.api.client.api_key = "wrong"
    with pytest.raises(gpustack_access.GpuStackError, match="HTTP 401: .*Invalid authentication.*check the credentials"):
        ctrl.tick()


def test_main_once_dry_run_and_unreachable(world, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pairserve_controller")
    ini = tmp_path / "c.ini"
    ini.write_text(INI.format(port=world.port, wake_log="", sleep="false", idle=30))
    world.metrics[8] = vllm_metrics(waiting=9, running=8)
    assert cli.main(["--config", str(ini), "--once", "--dry-run"]) == 0
    assert not world.puts("/v2/")
    assert "dry run: would set route qwen weights" in caplog.text
    # A port with nothing listening: the tick fails, --once exits 1.
    dead = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = dead.server_address[1]
    dead.server_close()
    ini.write_text(INI.format(port=port, wake_log="", sleep="false", idle=30))
    assert cli.main(["--config", str(ini), "--once"]) == 1
    assert cli.main(["--config", str(tmp_path / "missing.ini"), "--once"]) == 2


def test_a_cold_replica_is_parked_as_the_routes_fallback_and_unparked_when_warm(world):
    """GPUStack 2.3.0 answers 422 to a route mixing positive and 0 weights: the replica at 0 becomes the
    route's weight-0 fallback (accepted by 2.2.3 and 2.3.0), and its codes go when its weight comes back. A route
    with a fallback of its own keeps it and gets a plain 0 (what 2.2.3 accepts)."""
    api = gpustack_access.GpuStack("http://127.0.0.1:%d" % world.port, "k3y")
    IDS = {7: "qwen-node-a", 8: "qwen-node-b"}  # pylint: disable=invalid-name
    world.targets[1]["fallback_status_codes"] = None
    api.set_route_weights(world.route, world.targets, {"qwen-node-a": 100, "qwen-node-b": 0}, IDS)
    assert [(t["id"], t["weight"], t.get("fallback_status_codes")) for t in world.targets] == \
        [(11, 100, None), (12, 0, ["5xx"])]
    api.set_route_weights(world.route, world.targets, {"qwen-node-a": 58, "qwen-node-b": 42}, IDS)
    assert [(t["id"], t["weight"], t.get("fallback_status_codes")) for t in world.targets] == \
        [(11, 58, None), (12, 42, None)]

    # The user's own fallback on node-a's target: untouched, node-b at a plain 0.
    world.targets[0]["fallback_status_codes"] = ["4xx"]
    api.set_route_weights(world.route, world.targets, {"qwen-node-a": 100, "qwen-node-b": 0}, IDS)
    assert [(t["id"], t["weight"], t.get("fallback_status_codes")) for t in world.targets] == \
        [(11, 100, ["4xx"]), (12, 0, None)]


# -- its own /metrics -----------------------------------------------------------------------------------

def scrape(server, path="/metrics"):
    """GET path from the controller's metrics server: (status, content type, families parsed by prometheus_client)."""
    from prometheus_client.parser import text_string_to_metric_families  # pylint: disable=import-outside-toplevel
    url = "http://127.0.0.1:%d%s" % (server.server_address[1], path)
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
            return resp.status, resp.headers["Content-Type"], {
                f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
                for f in text_string_to_metric_families(text)}
    except urllib.error.HTTPError as err:
        return err.code, None, {}


def test_metrics_endpoint_shows_the_decisions_a_sleep_cycle_made(world, tmp_path):
    clock = [0.0]
    ctrl = make_controller(world, tmp_path, clock, sleep="true", idle=1)
    server = exposition.serve_metrics(ctrl.metrics, "127.0.0.1", 0)
    try:
        ctrl.tick()
        status, ctype, fams = scrape(server)
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), ctype
        assert fams["pairserve_controller_ticks"] == {(): 1.0}
        assert fams["pairserve_controller_route_weight"] == {
            (("model", "qwen-node-a"), ("route", "qwen")): 58.0, (("model", "qwen-node-b"), ("route", "qwen")): 42.0}
        assert fams["pairserve_controller_replica_asleep"] == {(("model", "qwen-node-b"),): 0.0}
        info = fams["pairserve_controller_info"]
        assert list(info) == [(("dry_run", "false"), ("mode", "queue_aware"), ("route", "qwen"), ("sleep", "true"))]
        clock[0] = 61
        ctrl.tick()                                   # idle: weight 0 first
        clock[0] = 62
        ctrl.tick()                                   # then scaled to zero
        _status, _ctype, fams = scrape(server)
        assert fams["pairserve_controller_ticks"] == {(): 3.0}
        assert fams["pairserve_controller_replica_asleep"] == {(("model", "qwen-node-b"),): 1.0}
        assert fams["pairserve_controller_route_weight"][(("model", "qwen-node-b"), ("route", "qwen"))] == 0.0
        assert fams["pairserve_controller_weight_updates"] == {(("route", "qwen"),): 1.0}
        assert fams["pairserve_controller_replica_scalings"] == {(("model", "qwen-node-b"), ("to", "0")): 1.0}
        assert fams["pairserve_controller_replica_ready"][(("model", "qwen-node-a"),)] == 1.0
        world.metrics[7] = vllm_metrics(waiting=5, running=8)
        clock[0] = 105
        ctrl.tick()                                   # pressure on A: wake B
        world.instance_state[8] = "running"
        clock[0] = 517.5
        ctrl.tick()
        _status, _ctype, fams = scrape(server)
        assert fams["pairserve_controller_wakes"] == {(("model", "qwen-node-b"),): 1.0}
        assert fams["pairserve_controller_last_wake_seconds"] == {(("model", "qwen-node-b"),): 412.5}
        assert fams["pairserve_controller_replica_requests_waiting"][(("model", "qwen-node-a"),)] == 5.0
        assert fams["pairserve_controller_replica_asleep"] == {(("model", "qwen-node-b"),): 0.0}
    finally:
        server.shutdown()
        server.server_close()


def test_a_failed_tick_is_counted_and_the_metrics_port_is_checked(world, tmp_path):
    ctrl = make_controller(world, tmp_path, [0.0])
    ctrl.route_name = "nope"
    assert cli._loop(ctrl, True, 5) == 1  # pylint: disable=protected-access
    assert ctrl.metrics.value("pairserve_controller_tick_errors_total") == 1.0
    assert ctrl.metrics.value("pairserve_controller_ticks_total") == 0.0
    ini = tmp_path / "c.ini"
    ini.write_text(INI.format(port=world.port, wake_log="", sleep="false", idle=30).replace(
        "hold = 0", "hold = 0\nmetrics_address = 127.0.0.1\nmetrics_port = 70000"))
    with pytest.raises(ValueError, match="metrics_port must be 0 .off. or a TCP port, got 70000"):
        config.check_config(config.read_config(str(ini)))
