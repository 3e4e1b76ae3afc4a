"""The route is changed only from what the run knows, against a real GPUStack: a GPU node that fails before the
replica play keeps its route target and weight exactly as GPUStack has them (not the inventory's, not removed),
the run names the kept target, and the next run that reaches the node sets the inventory's weights again; a node
that --limit leaves out is kept the same way and named as such.

The plays are the route role as site.yml runs it (on the server host, after a play on the GPU nodes); the GPU
nodes' play stands in for serve.yml's replica play: it sets each node's replica facts, or fails on a node the way
a node cut off from the server fails its server check."""

from __future__ import annotations

import re

import pytest
import yaml

from support.ansible_runner import run_module, run_playbook
from support.gpustack_models import config_only_checkpoint, model_args
from support.recap import parse_recap

pytestmark = pytest.mark.slow

MODEL = "kq"  # pairserve_model_name: the replicas are kq-node-a and kq-node-b
ROUTE = "kq-route"
INVENTORY_WEIGHTS = {"node-a": 58, "node-b": 42}


@pytest.fixture(scope="module")
def replicas(gpustack_server, tmp_path_factory):
    """Both nodes' replicas registered (no backend runs: config.json is enough), the route at 50/30; removed after."""
    server = gpustack_server
    path = config_only_checkpoint(tmp_path_factory.mktemp("keep-checkpoint"))
    for gpu, host in enumerate(("node-a", "node-b")):
        assert not run_module("gpustack_model", model_args(server, path, f"{MODEL}-{host}", [gpu])).failed
    yield server
    run_module("gpustack_route", {**server.key_args, "name": ROUTE, "state": "absent"})
    for host in ("node-a", "node-b"):
        run_module("gpustack_model", {**server.key_args, "name": f"{MODEL}-{host}", "state": "absent"})


def set_route(server, weights):
    targets = [{"model": f"{MODEL}-{host}", "weight": w} for host, w in weights.items()]
    assert not run_module("gpustack_route", {**server.key_args, "name": ROUTE, "targets": targets}).failed


def route_now(server) -> dict:
    """{model name: weight} of the route as GPUStack stores it."""
    names = dict((m["id"], m["name"]) for m in server.items("/v2/models"))
    route = [r for r in server.items("/v2/model-routes") if r["name"] == ROUTE][0]
    return dict((names[t["model_id"]], t["weight"])
                for t in server.items(f"/v2/model-route-targets?route_id={route['id']}")
                if t["route_id"] == route["id"] and not t.get("deleted_at"))


def site(tmp_path, server, failing=(), limit=None):
    """The GPU nodes' play (replica facts, or a failure on the hosts in ``failing``) then the route role."""
    port = re.search(r":(\d+)", server.api_url).group(1)
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "pairserve_model_name": MODEL},
        # The server's port is its host's (filter pairserve.llm.gpustack_server reads it from there).
        "children": {"gpustack_server": {"hosts": {"srv": {"pairserve_gpustack_api_port": int(port)}}},
                     "gpu_nodes": {"hosts": {"node-a": {}, "node-b": {}}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    plays = [
        {"name": "Replica facts of each GPU node", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
            {"name": "Fail as a node cut off from the server fails its server check",
             "ansible.builtin.fail": {"msg": "cannot reach the GPUStack server"},
             "when": "inventory_hostname in %s" % list(failing)},
            {"name": "Name this node's replicas", "ansible.builtin.set_fact": {"pairserve_replicas": [
                {"name": "%s-{{ inventory_hostname }}" % MODEL, "pair": 0, "profile": "text"}]}}]},
        {"name": "The route", "hosts": "gpustack_server", "gather_facts": False,
         "vars": {"pairserve_gpustack_management_key": server.api_key,
                  "pairserve_route_name": ROUTE, "pairserve_route_weights": INVENTORY_WEIGHTS},
         "tasks": [{"name": "Register the route", "ansible.builtin.import_role": {"name": "pairserve.llm.route"}}]},
    ]
    playbook = tmp_path / "site.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    return run_playbook(playbook, inventory=tmp_path / "hosts.yml", limit=limit, timeout=300)


def test_a_node_that_failed_keeps_its_target_and_a_rerun_restores_the_inventory(replicas, tmp_path):
    server = replicas
    set_route(server, {"node-a": 50, "node-b": 30})
    res = site(tmp_path, server, failing=["node-b"])
    assert res.rc != 0, res.stdout[-3000:]  # node-b failed: the run fails, and says so
    # node-a got the inventory's weight; node-b's target is exactly as GPUStack had it
    assert route_now(server) == {f"{MODEL}-node-a": 58, f"{MODEL}-node-b": 30}, res.stdout[-3000:]
    assert f"node-b failed earlier in this run: its route target {MODEL}-node-b is kept at 30" in res.stdout
    # the run that reaches node-b again sets the inventory's split; the one after changes nothing
    res = site(tmp_path, server)
    assert res.rc == 0 and route_now(server) == {f"{MODEL}-node-a": 58, f"{MODEL}-node-b": 42}, res.stdout[-3000:]
    assert "kept at" not in res.stdout
    res = site(tmp_path, server)
    assert parse_recap(res.stdout)["srv"]["changed"] == 0, res.stdout[-2000:]


def test_a_node_left_out_by_limit_is_kept_and_named_as_such(replicas, tmp_path):
    server = replicas
    set_route(server, {"node-a": 50, "node-b": 30})
    res = site(tmp_path, server, limit="srv,node-a")
    assert res.rc == 0, res.stdout[-3000:]
    assert route_now(server) == {f"{MODEL}-node-a": 58, f"{MODEL}-node-b": 30}
    assert f"node-b is not in this run (--limit): its route target {MODEL}-node-b is kept at 30" in res.stdout


def test_a_run_that_knows_no_gpu_node_leaves_the_route_as_it_is(replicas, tmp_path):
    server = replicas
    set_route(server, {"node-a": 50, "node-b": 30})
    # Every GPU node failed: Ansible ends the run before the route play, so the route cannot change.
    res = site(tmp_path, server, failing=["node-a", "node-b"])
    assert res.rc != 0 and "PLAY [The route]" not in res.stdout, res.stdout[-3000:]
    assert route_now(server) == {f"{MODEL}-node-a": 50, f"{MODEL}-node-b": 30}
    # The server alone (--limit): the route role runs, knows no GPU node, and keeps every target as it is.
    res = site(tmp_path, server, limit="srv")
    assert res.rc == 0, res.stdout[-3000:]
    assert route_now(server) == {f"{MODEL}-node-a": 50, f"{MODEL}-node-b": 30}
    assert f"node-a is not in this run (--limit): its route target {MODEL}-node-a is kept at 50" in res.stdout
    assert parse_recap(res.stdout)["srv"]["changed"] == 0, res.stdout[-2000:]
