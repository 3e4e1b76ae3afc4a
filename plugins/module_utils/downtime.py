# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How long a route did not answer: one small request after another, and the windows in which none succeeded.

A window opens when a request fails after a success (or the first request fails) and closes when the next request
succeeds; its length runs from the failed request's start to the successful one's end, so it never understates the
gap (it can overstate it by at most one interval and one request). The loop ends once the route has answered
``settle`` times in a row after a window (``settle=0``: never; a watch runs until told to stop), when ``stop()``
says so (right away while the route answers; during a window, once it answers again or ``stop_grace`` seconds
later), or after ``max_seconds``. ``progress(figures)`` gets the figures so far after every request, an open window
included (its ``end`` is now and ``open`` is true), so that a watcher can be read while it runs.
"""

from __future__ import annotations

import time


def measure(attempt, interval=0.5, max_seconds=900.0, settle=3, stop=None, stop_grace=120.0, clock=time.monotonic,
            wall=time.time, sleep=time.sleep, progress=None):
    """Run ``attempt()`` (returns None on success, else a short error text) until the loop ends; return the figures.

    {"requests", "failed_requests", "windows": [{"start", "end" (epoch seconds), "seconds", "failed_requests",
    "first_error"}], "unavailable_s", "longest_s", "recovered", "ended_by", "duration_s"}.
    ``recovered`` is false only while a window is still open at the end (the route did not come back).
    """
    start = clock()
    windows, open_window = [], None
    requests = failed = successes_after = 0
    ended_by = "max_seconds"
    stop_by = None  # when stop() came during a window: the latest moment to end it
    while True:
        began_mono, began_wall = clock(), wall()
        error = attempt()
        requests += 1
        if error is None:
            if open_window is not None:
                open_window["end"] = wall()
                open_window["seconds"] = round(open_window["end"] - open_window["start"], 3)
                windows.append(open_window)
                open_window, successes_after = None, 0
            if windows:
                successes_after += 1
                if settle and successes_after >= settle:
                    ended_by = "recovered"
                    break
        else:
            failed += 1
            if open_window is None:
                open_window = {"start": began_wall, "failed_requests": 0, "first_error": str(error)[:300]}
            open_window["failed_requests"] += 1
        if progress is not None:
            progress(_figures(windows, open_window, requests, failed, "running", clock() - start, wall()))
        if stop_by is None and stop is not None and stop():
            stop_by = clock() + stop_grace
        if stop_by is not None and (open_window is None or clock() >= stop_by):
            ended_by = "stopped"
            break
        if clock() - start >= max_seconds:
            break
        sleep(max(0.0, interval - (clock() - began_mono)))
    return _figures(windows, open_window, requests, failed, ended_by, clock() - start, wall())


def _figures(windows, open_window, requests, failed, ended_by, duration, now):
    """The figures, a window still open counted up to ``now`` (and marked ``open``)."""
    windows = list(windows)
    if open_window is not None:
        windows.append(dict(open_window, end=now, seconds=round(now - open_window["start"], 3), open=True))
    return {
        "requests": requests,
        "failed_requests": failed,
        "windows": windows,
        "unavailable_s": round(sum(w["seconds"] for w in windows), 3),
        "longest_s": round(max((w["seconds"] for w in windows), default=0.0), 3),
        "recovered": open_window is None,
        "failing_s": windows[-1]["seconds"] if open_window is not None else 0.0,
        "ended_by": ended_by,
        "duration_s": round(duration, 3),
    }


def details(figures):
    """The windows and counts of ``measure``'s figures as the end of a sentence: `` (10:02:11Z-10:02:25Z, 28
    failed, first: ...); 28 of 41 requests failed.``, plus a warning when the route did not come back."""
    spans = ["%s-%s, %d failed, first: %s" % (time.strftime("%H:%M:%SZ", time.gmtime(w["start"])),
                                              time.strftime("%H:%M:%SZ", time.gmtime(w["end"])),
                                              w["failed_requests"], w["first_error"]) for w in figures["windows"]]
    text = (" (%s)" % "; ".join(spans)) if spans else ""
    text += "; %d of %d requests failed." % (figures["failed_requests"], figures["requests"])
    if not figures["recovered"]:
        text += " It did NOT answer again before the measurement ended."
    return text
