"""lab/route_load.py's outage figures, as the restore drill reads them (`python -m lab scenario restore`): the longest
time between two answered requests with failures in it, its start (the last answer before) and end (the first answer
after), the first and last failure's time, and what failed after it. Driven with a clock the test sets."""

from __future__ import annotations

from lab.route_load import Tally


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def at(clock: Clock, tally: Tally, when: float, failure: str | None = None) -> None:
    clock.now = when
    tally.record(0.1, failure)


def test_a_loop_without_failures_has_no_outage():
    clock = Clock(1000.0)
    tally = Tally(clock=clock)
    for t in (1001, 1002, 1003):
        at(clock, tally, t)
    summary = tally.summary()
    assert summary["failed"] == 0 and summary["longest_outage"] is None, summary
    assert summary["first_failure_at"] is None and summary["last_failure_at"] is None
    assert summary["failures_after_longest_outage"] is None and summary["ok_after_longest_outage"] is None
    assert summary["started"] == 1000.0 and summary["last_ok_at"] == 1003.0


def test_the_longest_outage_runs_from_the_last_answer_before_to_the_first_answer_after():
    clock = Clock(1000.0)
    tally = Tally(clock=clock)
    at(clock, tally, 1001)
    at(clock, tally, 1002, "http_503")  # a short outage: 1001 -> 1003
    at(clock, tally, 1003)
    at(clock, tally, 1010)  # the last answer before the long one
    for t in (1011, 1020, 1050):
        at(clock, tally, t, "connection")
    at(clock, tally, 1060.5)  # the first answer after it
    at(clock, tally, 1061, "http_502")  # a failure once the route answers again
    at(clock, tally, 1062)
    summary = tally.summary()
    assert summary["longest_outage"] == {"from": 1010.0, "to": 1060.5, "seconds": 50.5, "failed": 3}, summary
    assert summary["first_failure_at"] == 1002.0 and summary["last_failure_at"] == 1061.0
    assert summary["failures_after_longest_outage"] == {"http_502": 1}
    assert summary["ok_after_longest_outage"] == 2  # the answer that ended it and the one after the failure
    assert summary["failures_by_class"] == {"http_503": 1, "connection": 3, "http_502": 1}


def test_an_outage_still_going_on_is_reported_open():
    clock = Clock(1000.0)
    tally = Tally(clock=clock)
    at(clock, tally, 1001)
    at(clock, tally, 1002, "connection")
    clock.now = 1100.0
    summary = tally.summary()
    assert summary["longest_outage"] == {"from": 1001.0, "to": None, "seconds": 99.0, "failed": 1}, summary
    assert summary["failures_after_longest_outage"] is None


def test_failures_before_the_first_answer_count_from_the_loops_start():
    clock = Clock(1000.0)
    tally = Tally(clock=clock)
    at(clock, tally, 1004, "connection")
    at(clock, tally, 1007)
    assert tally.summary()["longest_outage"] == {"from": 1000.0, "to": 1007.0, "seconds": 7.0, "failed": 1}
