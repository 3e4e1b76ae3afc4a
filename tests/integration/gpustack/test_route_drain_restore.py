"""gpustack_route's drain and restore, and the controller's route weights, against a real GPUStack: both go through
the one drain rule (routes.reweigh via gpustack.reweighed_route_targets), keep every target id, and are idempotent."""

from __future__ import annotations

import pytest

from support.ansible_runner import run_module
from support.gpustack_models import config_only_checkpoint, model_args

pytestmark = pytest.mark.slow

ROUTE = "dr-qwen"
MODELS = ("dr-a", "dr-b")


@pytest.fixture(scope="module")
def pool(gpustack_server, tmp_path_factory):
    """Two registered replicas (no backend runs: config.json is enough) behind route dr-qwen, 58/42; removed after."""
    server = gpustack_server
    path = config_only_checkpoint(tmp_path_factory.mktemp("drain-checkpoint"))
    for gpu, name in enumerate(MODELS):
        assert not run_module("gpustack_model", model_args(server, path, name, [gpu])).failed
    route = {**server.key_args, "name": ROUTE, "targets": [{"model": "dr-a", "weight": 58}, {"model": "dr-b", "weight": 42}]}
    assert not run_module("gpustack_route", route).failed
    yield route
    assert not run_module("gpustack_route", {**server.key_args, "name": ROUTE, "state": "absent"}).failed
    for name in MODELS:
        assert not run_module("gpustack_model", {**server.key_args, "name": name, "state": "absent"}).failed


def targets_now(server):
    """{model name: (target id, weight, fallback codes)} of the route as GPUStack stores it."""
    names = dict((m["id"], m["name"]) for m in server.items("/v2/models"))
    route = [r for r in server.items("/v2/model-routes") if r["name"] == ROUTE][0]
    return dict((names[t["model_id"]], (t["id"], t["weight"], t.get("fallback_status_codes")))
                for t in server.items(f"/v2/model-route-targets?route_id={route['id']}")
                if t["route_id"] == route["id"] and not t.get("deleted_at"))


def test_drain_parks_one_replica_and_restore_gives_its_weight_back(gpustack_server, pool):
    server = gpustack_server
    before = targets_now(server)
    ids = dict((m, v[0]) for m, v in before.items())
    drain = {**server.key_args, "name": ROUTE, "drain": ["dr-b"]}

    check = run_module("gpustack_route", drain, check=True, diff=True)
    assert check.changed and check["weights_before"] == {"dr-a": 58, "dr-b": 42}
    assert targets_now(server) == before  # check mode wrote nothing

    res = run_module("gpustack_route", drain, diff=True)
    assert res.changed and res["weights_before"] == {"dr-a": 58, "dr-b": 42}
    assert targets_now(server) == {"dr-a": (ids["dr-a"], 58, None), "dr-b": (ids["dr-b"], 0, ["5xx"])}
    assert not run_module("gpustack_route", drain).changed

    restore = {**server.key_args, "name": ROUTE, "restore": res["weights_before"]}
    assert run_module("gpustack_route", restore).changed
    assert targets_now(server) == before
    assert not run_module("gpustack_route", restore).changed
    # The route module with the inventory's targets agrees: nothing left over from the drain.
    assert not run_module("gpustack_route", pool).changed


def test_drain_refuses_what_would_leave_nothing_or_is_not_in_the_route(gpustack_server, pool):
    server = gpustack_server
    before = targets_now(server)
    both = run_module("gpustack_route", {**server.key_args, "name": ROUTE, "drain": list(MODELS)})
    assert both.failed and "would leave no target with a weight above 0" in both["msg"]
    other = run_module("gpustack_route", {**server.key_args, "name": ROUTE, "drain": ["dr-z"]})
    assert other.failed and "no target for dr-z" in other["msg"]
    missing = run_module("gpustack_route", {**server.key_args, "name": "dr-none", "drain": ["dr-a"]})
    assert missing.failed and "does not exist" in missing["msg"]
    mixed = run_module("gpustack_route", {**server.key_args, "name": ROUTE, "drain": ["dr-b"],
                                          "targets": [{"model": "dr-a"}]})
    assert mixed.failed and "mutually exclusive" in mixed["msg"]
    assert targets_now(server) == before


def test_the_controller_sets_weights_through_the_same_rule(gpustack_server, pool):
    """The controller's GPUStack access (the collection's client): a cold replica parked, then given weight back."""
    from pairserve_controller.gpustack_access import GpuStack  # pylint: disable=import-outside-toplevel

    server = gpustack_server
    before = targets_now(server)
    api = GpuStack(server.api_url, api_key=server.api_key, timeout=10)
    models = api.models_by_name()
    names_by_id = dict((m["id"], n) for n, m in models.items())
    route = api.route(ROUTE)
    api.set_route_weights(route, api.route_targets(route["id"]), {"dr-a": 100, "dr-b": 0}, names_by_id)
    assert targets_now(server) == {"dr-a": (before["dr-a"][0], 100, None), "dr-b": (before["dr-b"][0], 0, ["5xx"])}
    api.set_route_weights(route, api.route_targets(route["id"]), {"dr-a": 58, "dr-b": 42}, names_by_id)
    assert targets_now(server) == before
