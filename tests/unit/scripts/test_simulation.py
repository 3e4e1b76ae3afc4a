# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sanity properties of scripts/simulate_routing.py (the discrete-event model behind docs/queue-aware-weights.md)."""

from __future__ import annotations


import pytest

from support import scripts

sim = scripts.load(scripts.SIMULATION, "simulate_routing_under_test")
NAMES = list(sim.SEED)


def closed(routing, seed=1, duration=1800, clients=16, mix=None, warmup=None):
    return sim.simulate(sim.make_replicas(), routing, seed, duration, clients=clients, mix=mix, warmup=warmup)


def opened(routing, seed=1, duration=1800, rate=0.15, warmup=None):
    return sim.simulate(sim.make_replicas(), routing, seed, duration, rate=rate, warmup=warmup)


def test_the_weight_function_is_the_controllers():
    assert sim.POLICY.__file__.startswith(sim.CONTROLLER_PATH)
    routing = sim.QueueAwareRouting(NAMES, sim.SEED_WEIGHTS)
    assert routing.policy.mode == "queue_aware"


@pytest.mark.parametrize("make", [
    lambda: sim.StaticRouting(sim.SEED_WEIGHTS),
    lambda: sim.QueueAwareRouting(NAMES, sim.SEED_WEIGHTS),
])
def test_open_loop_conserves_requests_and_tokens(make):
    res = opened(make(), warmup=0.0)
    assert res.requests, "no request was generated"
    assert len({r.rid for r in res.requests}) == len(res.requests)           # each routed exactly once
    assert all(r.done is not None for r in res.requests)                      # drained: every one finished
    assert sum(res.served.values()) == len(res.requests)
    assert {n: sum(1 for r in res.requests if r.replica == n) for n in NAMES} == res.served
    # Every output token was produced once, by the replica the request went to.
    assert sum(res.tokens.values()) == sum(r.output for r in res.requests)
    for req in res.requests:
        assert req.arrival <= req.first_token <= req.done
        # No request beats its own prefill at the replica's prefill rate.
        assert req.first_token - req.arrival >= req.prompt / sim.SEED[req.replica]["prefill"] - 1e-9


def test_closed_loop_keeps_the_client_count():
    res = closed(sim.StaticRouting(sim.SEED_WEIGHTS), clients=5)
    in_flight = [r for r in res.requests if r.done is None or r.done > res.duration]
    assert len(in_flight) <= 5
    per_client = {}
    for req in res.requests:
        per_client.setdefault(req.client, []).append(req)
    assert set(per_client) == set(range(5))
    for reqs in per_client.values():  # a client sends its next request only after the previous one finished
        for prev, nxt in zip(reqs, reqs[1:]):
            assert prev.done is not None and nxt.arrival == pytest.approx(prev.done)


def test_a_replica_with_zero_weight_gets_nothing():
    res = opened(sim.StaticRouting({"node-a": 100, "node-b": 0}))
    assert res.served["node-b"] == 0 and res.tokens["node-b"] == 0
    assert all(r.replica == "node-a" for r in res.requests)


def test_decode_calibration_reproduces_the_seed():
    for name, fig in sim.SEED.items():
        rep = sim.make_replicas([name])[name]
        assert rep.aggregate_decode_tps(1) == pytest.approx(fig["single"])
        assert rep.aggregate_decode_tps(8) == pytest.approx(fig["saturation"])
    # Measured through the event loop: one client, tiny prompts, long outputs -> single-stream decode speed;
    # eight such clients -> the saturation figure.
    decode_only = {"text": (1.0, (1, 1), (2000, 2000))}
    for name, fig in sim.SEED.items():
        one = sim.simulate(sim.make_replicas([name]), sim.StaticRouting({name: 100}), 1, 900, clients=1,
                           mix=decode_only)
        eight = sim.simulate(sim.make_replicas([name]), sim.StaticRouting({name: 100}), 1, 900, clients=8,
                             mix=decode_only)
        assert one.throughput == pytest.approx(fig["single"], rel=0.01)
        assert eight.throughput == pytest.approx(fig["saturation"], rel=0.01)


def test_prefill_blocks_decode_in_the_same_step():
    rep = sim.make_replicas(["node-a"])["node-a"]
    long = sim.Request(1, "agent", 70000, 10, 0.0)
    rep.waiting.append(long)
    end = rep.start_step(0.0)
    assert end == pytest.approx(8192 / 2767.0)  # one chunk of the batched-token budget
    rep.finish_step(end)
    assert long.prefill_left == 70000 - 8192


def test_same_seed_same_result_other_seed_other_result():
    one = closed(sim.StaticRouting(sim.SEED_WEIGHTS), seed=3, duration=900)
    two = closed(sim.StaticRouting(sim.SEED_WEIGHTS), seed=3, duration=900)
    other = closed(sim.StaticRouting(sim.SEED_WEIGHTS), seed=4, duration=900)
    assert one.throughput == two.throughput and one.served == two.served
    assert (other.throughput, other.served) != (one.throughput, one.served)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_queue_aware_is_never_worse_than_a_wrong_static_split(seed):
    wrong = closed(sim.StaticRouting(sim.WRONG_WEIGHTS), seed=seed, duration=3600)
    aware = closed(sim.QueueAwareRouting(NAMES, sim.SEED_WEIGHTS), seed=seed, duration=3600)
    assert aware.throughput >= wrong.throughput
    assert aware.weight_changes > 0


def test_queue_aware_moves_requests_off_a_replica_that_starts_behind():
    # Both start at 58/42; A starts with three 70K prompts queued. Image requests follow. Static routing keeps
    # sending 58% to A; the controller that sees the queued tokens sends them to B while A works; the one that
    # sees only vLLM's counts (3 waiting x the mean prompt of the mix) moves less, but still away from A.
    def share_to_a(routing):
        backlog = {"node-a": [sim.Request(-1 - i, "agent", 70000, 1000, 0.0) for i in range(3)]}
        mix = {"image": (1.0, (2500, 4000), (100, 300))}
        res = sim.simulate(sim.make_replicas(), routing, 5, 60, rate=0.5, mix=mix, warmup=0.0, backlog=backlog)
        routed = [r for r in res.requests if r.rid > 0]
        return sum(1 for r in routed if r.replica == "node-a") / len(routed)
    static = share_to_a(sim.StaticRouting(sim.SEED_WEIGHTS))
    exact = share_to_a(sim.QueueAwareRouting(NAMES, sim.SEED_WEIGHTS, exact=True))
    counts = share_to_a(sim.QueueAwareRouting(NAMES, sim.SEED_WEIGHTS))
    assert exact < 0.3 < 0.45 < static
    assert exact <= counts < static


def test_simulation_arguments_are_checked():
    with pytest.raises(ValueError, match="either clients"):
        sim.simulate(sim.make_replicas(), sim.StaticRouting(sim.SEED_WEIGHTS), 1, 10)
    assert sim.percentile([], 95) is None
    assert sim.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 95) == 10
    assert sim.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 50) == 5


def test_check_compares_the_doc_block(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n%s\nstale\n%s\nrest\n" % (sim.BEGIN, sim.END))
    monkeypatch.setattr(sim, "DOC_PATH", str(doc))
    args = ["--duration", "900", "--sweep", "0"]
    assert sim.main(args + ["--check"]) == 1
    table = capsys.readouterr().out
    assert "| (c) queue-aware, vLLM metrics |" in table
    doc.write_text("intro\n%s\n%s%s\nrest\n" % (sim.BEGIN, table, sim.END))
    assert sim.main(args + ["--check"]) == 0


def test_the_doc_holds_the_current_table():
    """docs/queue-aware-weights.md must show what the script prints with its defaults (13 s on 2 cores)."""
    assert sim.main(["--check"]) == 0
