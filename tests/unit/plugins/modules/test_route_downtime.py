"""route_downtime through Ansible against a real HTTP server on 127.0.0.1 that goes away and comes back: the gap it
reports covers the outage and is not longer than the outage plus one interval and one request; a 503 counts as
down; a stop file ends a measurement that saw no gap; the loop's rules on their own."""

from __future__ import annotations

import json
import threading
import time
from http.server import ThreadingHTTPServer

from ansible_collections.pairserve.llm.plugins.module_utils import downtime
from support.ansible_runner import run_local_play, run_module
from support.local_http import QuietHandler, send_json

KEY = "sk-test-route-downtime"


class Route(QuietHandler):
    status = 200  # the class attribute a test flips to make the route answer 503
    served = 0  # successful answers so far

    def do_POST(self):  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        ok = self.headers.get("Authorization") == "Bearer " + KEY and body.get("model") == "qwen"
        status = type(self).status if ok else 401
        payload = ({"choices": [{"message": {"role": "assistant", "content": "OK"}}]} if status == 200
                   else {"error": {"message": "no running instance"}})
        send_json(self, status, payload)
        type(self).served += status == 200


def serve(port=0):
    server = ThreadingHTTPServer(("127.0.0.1", port), Route)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def wait_served(count=3, timeout=60):
    """Until the route has answered COUNT more requests: the measurement runs."""
    Route.served, deadline = 0, time.time() + timeout
    while Route.served < count and time.time() < deadline:
        time.sleep(0.1)


def outage(server, seconds, during=None):
    """Take SERVER away for SECONDS (calling DURING half-way), then serve again on its port: (new server, down, up)."""
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    down = time.time()
    time.sleep(seconds / 2)
    if during:
        during()
    time.sleep(seconds / 2)
    # "up" before the server listens: nothing can answer earlier, so the window cannot end before it (taken after
    # serve(), a request answered in between made the window end microseconds before "up" on a loaded machine).
    up = time.time()
    return serve(port), down, up


def in_background(args):
    box = {}
    thread = threading.Thread(target=lambda: box.update(result=run_module("route_downtime", args, timeout=120)))
    thread.start()
    return thread, box


def args(port, **more):
    return {"base_url": "http://127.0.0.1:%d" % port, "api_key": KEY, "model": "qwen", "interval": 0.2,
            "request_timeout": 2, "max_seconds": 60, **more}


def test_a_server_that_goes_away_and_comes_back_gives_one_window_covering_the_outage():
    server = serve()
    port = server.server_address[1]
    thread, box = in_background(args(port))
    try:
        wait_served()
        server, down, up = outage(server, 2.0)
        thread.join(90)
    finally:
        server.shutdown()
        server.server_close()
    res = box["result"]
    assert res.rc == 0 and res["changed"] is False, res.stdout[-2000:]
    assert res["ended_by"] == "recovered" and res["recovered"] is True, res.result
    assert len(res["windows"]) == 1, res["windows"]
    window = res["windows"][0]
    # it covers the outage and exceeds it by at most one interval plus one (refused, so fast) request
    assert window["start"] <= down + 0.3 and window["end"] >= up, (window, down, up)
    assert up - down <= window["seconds"] <= up - down + 0.2 + 0.5, (window, up - down)
    assert window["failed_requests"] >= 5 and "unreachable" in window["first_error"], window
    assert res["unavailable_s"] == res["longest_s"] == window["seconds"]
    assert "sk-test" not in res.stdout  # the key is no_log


def test_a_503_counts_as_down_and_a_stop_file_ends_a_measurement(tmp_path):
    server = serve()
    port = server.server_address[1]
    stop = tmp_path / "stop"
    stop.write_text("")  # a stale one from an interrupted run: removed at start, must not end this run
    thread, box = in_background(args(port, stop_file=str(stop), settle=1000))
    try:
        wait_served()  # the module runs (its start takes seconds on a loaded machine)
        Route.status = 503
        time.sleep(1.0)
        Route.status = 200
        wait_served(2)
        stop.write_text("")
        thread.join(60)
    finally:
        Route.status = 200
        server.shutdown()
        server.server_close()
    res = box["result"]
    assert res.rc == 0 and res["ended_by"] == "stopped" and not stop.exists(), res.result
    assert len(res["windows"]) == 1 and res["windows"][0]["first_error"].startswith("HTTP 503: no running instance")
    # the window opens at the first failed request, which may start up to one interval (0.2 s) after the flip
    assert 1.0 - 0.2 - 0.05 <= res["windows"][0]["seconds"] <= 1.0 + 0.2 + 0.5, res["windows"]


def test_told_to_stop_while_the_route_is_down_it_measures_the_gap_to_its_end(tmp_path):
    server = serve()
    port = server.server_address[1]
    stop = tmp_path / "stop"
    thread, box = in_background(args(port, stop_file=str(stop), settle=1000))
    try:
        wait_served()
        # the play is done with the restart half-way through, while the route does not answer yet
        server, _down, back = outage(server, 2.0, during=lambda: stop.write_text(""))
        thread.join(60)
    finally:
        server.shutdown()
        server.server_close()
    res = box["result"]
    assert res["ended_by"] == "stopped" and res["recovered"] is True and not stop.exists(), res.result
    assert len(res["windows"]) == 1 and res["windows"][0]["end"] >= back, (res["windows"], back)


def test_a_route_that_never_comes_back_is_reported_as_not_recovered():
    ticks = iter(range(10_000))

    def clock():  # advances one interval per reading
        return next(ticks) * 0.5

    answers = iter([None, None, "unreachable"] + ["unreachable"] * 100)
    got = downtime.measure(lambda: next(answers), interval=0.5, max_seconds=10, settle=3, clock=clock,
                           wall=clock, sleep=lambda s: None)
    assert got["ended_by"] == "max_seconds" and got["recovered"] is False, got
    assert len(got["windows"]) == 1 and got["windows"][0]["first_error"] == "unreachable"
    assert got["failed_requests"] == got["requests"] - 2
    text = downtime.details(got)
    assert text.endswith("requests failed. It did NOT answer again before the measurement ended."), text
    # told to stop during the outage: it keeps measuring for stop_grace, then ends with the window still open
    ticks = iter(range(10_000))
    answers = iter(["unreachable"] * 100)
    stopped = downtime.measure(lambda: next(answers), interval=0.5, max_seconds=60, stop=lambda: True, stop_grace=2,
                               clock=clock, wall=clock, sleep=lambda s: None)
    assert stopped["ended_by"] == "stopped" and stopped["recovered"] is False, stopped
    assert stopped["duration_s"] >= 2 and stopped["requests"] < 10, stopped  # ended by the grace, not max_seconds
    assert ", %d failed, first: unreachable)" % got["failed_requests"] in text, text


def test_bad_settings_are_refused():
    res = run_module("route_downtime", {"base_url": "http://127.0.0.1:9", "model": "qwen", "interval": 0.01})
    assert res.failed and "interval must be at least 0.1" in res["msg"], res.result


def test_the_upgrade_plays_steps_measure_report_and_leave_nothing(tmp_path):
    """Role upgrade's downtime_start / downtime_report, as its entry point server runs them around the server role."""
    server = serve()
    port = server.server_address[1]
    stop, outage_done, async_dir = tmp_path / "stop", tmp_path / "outage-done", tmp_path / "async"
    play_vars = {"pairserve_gpustack_api_port": port, "pairserve_gpustack_inference_key": KEY,
                 "pairserve_upgrade_downtime_model": "qwen", "pairserve_upgrade_downtime_stop_file": str(stop),
                 "pairserve_upgrade_downtime_interval": 0.2, "ansible_async_dir": str(async_dir)}
    box = {}
    thread = threading.Thread(target=lambda: box.update(res=run_local_play(tmp_path, "Downtime", [
        {"name": "Start", "ansible.builtin.include_role": {"name": "pairserve.llm.upgrade",
                                                           "tasks_from": "downtime_start"}},
        # the server role's restart, played by the test below
        {"name": "Restart", "ansible.builtin.wait_for": {"path": str(outage_done), "timeout": 60}},
        {"name": "Report", "ansible.builtin.include_role": {"name": "pairserve.llm.upgrade",
                                                            "tasks_from": "downtime_report"}},
    ], play_vars, timeout=180, server=True)))
    thread.start()
    try:
        wait_served()
        server, down, up = outage(server, 1.5)
        gap = up - down
        time.sleep(1.0)
        outage_done.write_text("")
        thread.join(150)
    finally:
        server.shutdown()
        server.server_close()
    res = box["res"]
    assert res.rc == 0, res.stdout[-3000:]
    msg = " ".join(res.by_task["Report the route's gap while the server restarted"]["msg"].split())
    seconds = float(msg.split("was unavailable for ")[1].split(" s")[0])
    assert gap <= seconds <= gap + 0.2 + 0.5, (msg, gap)
    assert msg.startswith("The route qwen was unavailable for") and "first: unreachable" in msg, msg
    assert "did NOT answer again" not in msg, msg
    # the stop file was read and removed, the job's files are gone, and the key never reached the output
    assert not stop.exists() and not any(async_dir.iterdir()), list(async_dir.iterdir())
    assert KEY not in res.stdout


def test_a_drained_maintenance_stops_when_the_routes_other_targets_stop_answering(tmp_path):
    """maintenance's watch_start / watch_check / watch_report, as restart and upgrade_node run them while a node is
    drained: the watch reads the status file the module writes while it runs; a route that answers is let through,
    one that answers nothing for the grace stops the maintenance naming the route and what the requests got, and
    the report gives the seconds without an answering target and leaves no file behind."""
    server = serve()
    port = server.server_address[1]
    status, stop, async_dir = tmp_path / "watch.json", tmp_path / "watch.stop", tmp_path / "async"
    outage_started = tmp_path / "outage-started"
    play_vars = {"pairserve_gpustack_inference_key": KEY, "pairserve_maintenance_server": "localhost",
                 "pairserve_maintenance_route_plan": [{"name": "qwen", "drainable": True},
                                                      {"name": "other", "drainable": False}],
                 "pairserve_maintenance_watch_status_file": str(status),
                 "pairserve_maintenance_watch_stop_file": str(stop), "pairserve_maintenance_watch_interval": 0.2,
                 "pairserve_maintenance_watch_grace": 1.5, "ansible_async_dir": str(async_dir)}

    def step(name, tasks_from):
        return {"name": name, "ansible.builtin.include_role": {"name": "pairserve.llm.maintenance",
                                                               "tasks_from": tasks_from}}
    box = {}
    thread = threading.Thread(target=lambda: box.update(res=run_local_play(tmp_path, "Watch", [
        # what connect.yml leaves on the server host (hostvars): its port and its inference key
        {"name": "The server's port", "ansible.builtin.set_fact": {"pairserve_gpustack_api_port": port,
                                                                   "pairserve_gpustack_inference_key": KEY}},
        {"name": "Drained", "block": [
            step("Start", "watch_start"),
            {"name": "Let it answer", "ansible.builtin.wait_for": {"path": str(status), "timeout": 30}},
            {"name": "Settle", "ansible.builtin.pause": {"seconds": 1}},
            step("Check while it answers", "watch_check"),
            {"name": "The other node goes away",
             "ansible.builtin.wait_for": {"path": str(outage_started), "timeout": 60}},
            {"name": "Longer than the grace", "ansible.builtin.pause": {"seconds": 3}},
            step("Check after the grace", "watch_check"),
            {"name": "Not reached", "ansible.builtin.debug": {"msg": "the watch let a dead route through"}},
        ], "rescue": [
            {"name": "Stopped", "ansible.builtin.debug": {"msg": "{{ ansible_failed_result.msg }}"}},
            {"name": "Lost", "ansible.builtin.debug": {"var": "pairserve_maintenance_watch_lost"}},
        ], "always": [step("Report", "watch_report")]},
    ], play_vars, timeout=240, server=True)))
    thread.start()
    try:
        wait_served()
        port = server.server_address[1]
        server.shutdown()
        server.server_close()
        down = time.time()
        outage_started.write_text("")
        time.sleep(6)
        server = serve(port)
        thread.join(200)
    finally:
        server.shutdown()
        server.server_close()
    res = box["res"]
    assert res.rc == 0, res.stdout[-3000:]
    assert "Not reached" not in res.by_task, res.stdout[-3000:]
    stopped = " ".join(res.by_task["Stopped"]["msg"].split())
    assert stopped.startswith("While localhost was drained, route qwen did not answer through its other targets"), stopped
    assert "first: unreachable" in stopped and "stops here" in stopped, stopped
    assert res.by_task["Lost"]["pairserve_maintenance_watch_lost"] is True
    report = " ".join(res.by_task["Report the seconds the route had no target that answered while this node was "
                                  "drained"]["msg"].split())
    seconds = float(report.split("answered for ")[1].split(" s")[0])
    assert 1.5 <= seconds <= 6 + 0.2 + 2.5, (report, time.time() - down)
    assert not stop.exists() and not status.exists() and not any(async_dir.iterdir()), list(async_dir.iterdir())
    assert KEY not in res.stdout
