"""lab/queue_weights.py: each replica's backlog in the demonstration is about the controller's horizon of work."""

from __future__ import annotations

from lab import queue_weights as qw


def _speeds(fast_decode, slow_decode):
    return {qw.FAST: {"prefill_tps": 57456, "decode_tps": fast_decode},
            qw.SLOW: {"prefill_tps": 11155, "decode_tps": slow_decode}}


def test_each_backlog_is_about_the_horizon_of_work_at_the_replicas_speed():
    speeds = _speeds(669.5, 322.2)  # docs/controller.md's measured lab speeds, the lab's 5 s horizon, 96 tokens
    # c x 96 / 2 tokens left at 322.2 tok/s >= 5 s: c = 34 (16 gave the slow replica a queue of about 2.4 s)
    assert qw.backlog_concurrency(16, speeds, qw.SLOW, 5, 96) == 34
    assert qw.backlog_concurrency(16, speeds, qw.FAST, 5, 96) == 70


def test_never_fewer_than_asked_for():
    assert qw.backlog_concurrency(16, _speeds(100, 50), qw.FAST, 5, 96) == 16
    assert qw.backlog_concurrency(40, _speeds(669.5, 322.2), qw.SLOW, 5, 96) == 40
