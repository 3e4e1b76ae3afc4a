"""The control plane failing under a module: PostgreSQL stopped while gpustack_model runs, the GPUStack server
SIGKILLed while gpustack_route updates the route. Both against a real GPUStack 2.2.3 on a real PostgreSQL (a
server of this suite's own: it is broken on purpose), with a proxy that triggers the fault at a chosen request."""

from __future__ import annotations


import pytest

from faults_helpers import FaultProxy, SEED, record, rng, run_module
from support.gpustack_models import config_only_checkpoint, model_args

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return config_only_checkpoint(tmp_path_factory.mktemp("checkpoint"))


def models_named(server, name):
    return [m for m in server.items("/v2/models") if m["name"] == name]


def route_weights(server, name):
    """{model name: [weights of its targets]} of the route (a list, so a doubled target shows)."""
    routes = [r for r in server.items("/v2/model-routes") if r["name"] == name]
    assert len(routes) == 1, routes
    names = {m["id"]: m["name"] for m in server.items("/v2/models")}
    weights = {}
    for target in server.items(f"/v2/model-route-targets?route_id={routes[0]['id']}"):
        if target["route_id"] == routes[0]["id"] and not target.get("deleted_at"):
            weights.setdefault(names.get(target["model_id"]), []).append(target["weight"])
    return weights


def test_postgres_stopped_while_gpustack_model_runs(gpustack_server, checkpoint):
    server = gpustack_server
    args = model_args(server, checkpoint, "fault-pg", [0])
    stopped = []

    def stop_postgres():
        server.stop_postgres()
        stopped.append(True)

    # The module's first request reaches a healthy server; PostgreSQL stops before its second one.
    # retries=1: the default 3 only adds backoff seconds before the same answer.
    with FaultProxy(server.api_url, lambda method, path, index: "before" if index == 1 else None,
                    stop_postgres) as proxy:
        try:
            failed = run_module("gpustack_model", dict(args, api_url=proxy.url, retries=1))
        finally:
            server.start_postgres()
    assert stopped, "PostgreSQL was never stopped: the module sent %s" % proxy.seen
    assert failed["_rc"] != 0 and failed["failed"], failed
    msg = failed["msg"]
    # clear: which server (the URL the module was given), what it answered, what to check
    assert proxy.url in msg and "HTTP 500" in msg and "PostgreSQL" in msg, msg
    assert failed["status"] == 500
    assert models_named(server, "fault-pg") == [], "a failed run left a model behind"

    rerun = run_module("gpustack_model", args)
    assert rerun["_rc"] == 0 and rerun["changed"], rerun
    stored = models_named(server, "fault-pg")
    assert len(stored) == 1 and stored[0]["gpu_selector"]["gpu_ids"] == args["gpu_ids"]
    third = run_module("gpustack_model", args)
    assert third["_rc"] == 0 and not third["changed"], third
    record("PostgreSQL stopped during gpustack_model", {
        "seed": SEED, "faults_tried": 1, "failed_with_clear_message": 1, "reruns_converged": 1,
        "third_run_changed": int(third["changed"]), "message": msg})


def test_gpustack_killed_during_route_update(gpustack_server, checkpoint):
    server = gpustack_server
    for name, gpu in (("fault-a", 0), ("fault-b", 1)):
        made = run_module("gpustack_model", model_args(server, checkpoint, name, [gpu]))
        assert made["_rc"] == 0, made
    base = {**server.key_args, "name": "fault-route"}
    first = run_module("gpustack_route", dict(base, targets=[{"model": "fault-a", "weight": 50},
                                                             {"model": "fault-b", "weight": 50}]))
    assert first["_rc"] == 0 and route_weights(server, "fault-route") == {"fault-a": [50], "fault-b": [50]}, first
    models_before = {m["name"]: m for m in server.items("/v2/models") if m["name"] in ("fault-a", "fault-b")}

    wanted = dict(base, targets=[{"model": "fault-a", "weight": 58}, {"model": "fault-b", "weight": 42}])
    delay = rng("gpustack_route").uniform(0.0, 0.05)
    # The route's PUT reaches GPUStack; `delay` seconds later the server is SIGKILLed, answered or not.
    with FaultProxy(server.api_url,
                    lambda method, path, index: "during" if method == "PUT" and "/model-routes/" in path else None,
                    server.kill_server, delay=delay) as proxy:
        try:
            failed = run_module("gpustack_route", dict(wanted, api_url=proxy.url, retries=1))
        finally:
            if server.server_pid is None:
                restart_s = server.restart_server()
    assert ("PUT" in {m for m, _p in proxy.seen}), proxy.seen
    assert failed["_rc"] != 0 and failed["failed"], failed
    assert "cannot reach GPUStack at %s" % proxy.url in failed["msg"], failed["msg"]

    rerun = run_module("gpustack_route", wanted)
    assert rerun["_rc"] == 0 and not rerun.get("failed"), rerun
    # the route as asked, each model once; the replicas themselves untouched by the crash
    assert route_weights(server, "fault-route") == {"fault-a": [58], "fault-b": [42]}
    models_after = {m["name"]: m for m in server.items("/v2/models") if m["name"] in ("fault-a", "fault-b")}
    for name, before in models_before.items():
        after = models_after[name]
        for key in ("id", "local_path", "gpu_selector", "backend_parameters", "env", "backend_version", "replicas"):
            assert after[key] == before[key], (name, key, before[key], after[key])
    third = run_module("gpustack_route", wanted)
    assert third["_rc"] == 0 and not third["changed"], third
    record("GPUStack server SIGKILLed during gpustack_route", {
        "seed": SEED, "kill_delay_ms": round(delay * 1000, 1), "kills_tried": 1,
        "update_answered_before_kill": proxy.answered_before_fault, "restart_s": round(restart_s, 1),
        "rerun_changed": int(rerun["changed"]), "reruns_converged": 1, "third_run_changed": int(third["changed"]),
        "route_weights": "58/42"})
