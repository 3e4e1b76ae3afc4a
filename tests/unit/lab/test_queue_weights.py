"""lab/queue_weights.py: each replica's backlog in the demonstration is about the same queued seconds."""

from __future__ import annotations

from lab import queue_weights as qw


def _speeds(fast_decode, slow_decode):
    return {qw.FAST: {"prefill_tps": 57456, "decode_tps": fast_decode},
            qw.SLOW: {"prefill_tps": 11155, "decode_tps": slow_decode}}


def test_the_fast_replica_gets_as_many_more_requests_at_a_time_as_it_decodes_faster():
    speeds = _speeds(669.5, 322.2)  # docs/controller.md's measured lab speeds
    assert qw.backlog_concurrency(16, speeds, qw.SLOW) == 16
    assert qw.backlog_concurrency(16, speeds, qw.FAST) == 33


def test_never_fewer_than_asked_for():
    speeds = _speeds(300, 322.2)  # a "fast" replica measured slower still gets the base concurrency
    assert qw.backlog_concurrency(16, speeds, qw.FAST) == 16
