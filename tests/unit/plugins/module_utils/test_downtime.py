"""Tests of module_utils/downtime.py on a simulated clock (no real waiting): the window arithmetic (from the failed
request's start to the successful one's end), the settle count, the pacing of requests, what ends the loop (settle,
stop() with its grace, max_seconds), the figures progress() sees while a window is open, and details()' sentence.
The module route_downtime against a real server is tested in tests/unit/plugins/modules/test_route_downtime.py."""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils import downtime

EPOCH = 1_700_000_000  # 2023-11-14 22:13:20 UTC


class Route:
    """A route that answers from a script, each request taking ``took`` seconds of a clock only it and sleep advance."""

    def __init__(self, answers, took=1):
        self.answers, self.took, self.now, self.sleeps = list(answers), took, 0, []

    def clock(self):
        return self.now

    def wall(self):
        return EPOCH + self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def attempt(self):
        self.now += self.took
        return self.answers.pop(0)

    def measure(self, **options):
        return downtime.measure(self.attempt, clock=self.clock, wall=self.wall, sleep=self.sleep, **options)


def test_one_outage_is_one_window_from_the_failed_requests_start_to_the_next_successs_end():
    route = Route([None, "refused", "refused", None, None, None])
    got = route.measure(interval=4, settle=3)
    # requests start at 0, 4, 8, 12, 16, 20 and take 1 s: the window runs from 4 to 13
    assert got == {"requests": 6, "failed_requests": 2,
                   "windows": [{"start": EPOCH + 4, "end": EPOCH + 13, "seconds": 9, "failed_requests": 2,
                                "first_error": "refused"}],
                   "unavailable_s": 9, "longest_s": 9, "recovered": True, "failing_s": 0.0, "ended_by": "recovered",
                   "duration_s": 21}
    assert route.sleeps == [3] * 5  # the interval less the request's own time; none after the last


def test_a_request_slower_than_the_interval_is_followed_at_once():
    route = Route(["timeout", None, None], took=7)
    got = route.measure(interval=5, settle=2)
    assert route.sleeps == [0.0, 0.0] and got["ended_by"] == "recovered"
    assert got["windows"][0]["start"] == EPOCH and got["windows"][0]["seconds"] == 14


def test_windows_add_up_and_the_first_error_of_each_is_kept_short():
    long_error = "x" * 400
    route = Route([long_error, None, "503", "reset", None, None])
    got = route.measure(interval=1, settle=2)
    assert [(w["failed_requests"], w["first_error"]) for w in got["windows"]] == [(1, "x" * 300), (2, "503")]
    assert [w["seconds"] for w in got["windows"]] == [2, 3]
    assert (got["unavailable_s"], got["longest_s"], got["failed_requests"], got["requests"]) == (5, 3, 3, 6)


def test_a_route_that_never_failed_runs_until_max_seconds_and_settle_0_never_ends_by_recovery():
    route = Route([None] * 10)
    got = route.measure(interval=2, max_seconds=6, settle=3)
    assert (got["ended_by"], got["requests"], got["windows"], got["recovered"]) == ("max_seconds", 4, [], True)
    route = Route(["down", None, None, None, None, None])
    got = route.measure(interval=2, max_seconds=11, settle=0)
    assert (got["ended_by"], got["requests"], len(got["windows"]), got["recovered"]) == ("max_seconds", 6, 1, True)


def test_stop_ends_at_once_while_the_route_answers_and_at_its_next_answer_during_a_window():
    route = Route([None, None])
    got = route.measure(interval=2, stop=lambda: True)
    assert (got["ended_by"], got["requests"]) == ("stopped", 1)
    # told to stop during the outage: the window is measured to its end, within the grace
    route = Route(["down", "down", None, None])
    got = route.measure(interval=2, stop=lambda: True, stop_grace=10)
    assert (got["ended_by"], got["requests"], got["recovered"]) == ("stopped", 3, True)
    assert got["windows"][0]["seconds"] == 5
    # the grace runs out before it answers: the window is still open at the end
    route = Route(["down"] * 10)
    got = route.measure(interval=2, stop=lambda: True, stop_grace=3)
    assert (got["ended_by"], got["requests"], got["recovered"], got["failing_s"]) == ("stopped", 3, False, 5)
    assert got["windows"][0]["open"] is True


def test_progress_sees_an_open_window_counted_up_to_now():
    seen = []
    route = Route([None, "down", "down", None])
    got = route.measure(interval=2, settle=1, progress=seen.append)
    # after every request but the one that ends the loop: that one's figures are the result (route_downtime writes
    # them to its status file itself)
    assert [(f["requests"], f["recovered"], f["failing_s"], f["ended_by"]) for f in seen] == [
        (1, True, 0.0, "running"), (2, False, 1, "running"), (3, False, 3, "running")]
    assert seen[2]["windows"] == [{"start": EPOCH + 2, "end": EPOCH + 5, "seconds": 3, "failed_requests": 2,
                                   "first_error": "down", "open": True}]
    assert (got["requests"], got["ended_by"]) == (4, "recovered") and "open" not in got["windows"][0]


def test_details_name_each_window_in_utc_and_warn_when_the_route_did_not_come_back():
    figures = {"windows": [{"start": EPOCH, "end": EPOCH + 14, "failed_requests": 28, "first_error": "HTTP 503"},
                           {"start": EPOCH + 3600, "end": EPOCH + 3601, "failed_requests": 1, "first_error": "reset"}],
               "failed_requests": 29, "requests": 41, "recovered": True}
    assert downtime.details(figures) == (" (22:13:20Z-22:13:34Z, 28 failed, first: HTTP 503; "
                                         "23:13:20Z-23:13:21Z, 1 failed, first: reset); 29 of 41 requests failed.")
    assert downtime.details({"windows": [], "failed_requests": 0, "requests": 5, "recovered": True}) == \
        "; 0 of 5 requests failed."
    assert downtime.details(dict(figures, recovered=False)).endswith(
        "29 of 41 requests failed. It did NOT answer again before the measurement ended.")
