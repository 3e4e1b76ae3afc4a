"""pytest-testinfra checks of the serving half of site.yml on the lab: replicas pinned to the recorded pairs,
the weighted route over both, and requests answered through the route by both replicas.

Runs on the controller against GPUStack on node-a (the lab shares the host's network, so 127.0.0.1:30080 is
node-a's API) and reads the secrets from the node the way an operator would.
"""

from __future__ import annotations

import re
import urllib.request

import pytest

from support.lab_api import ROUTE, WEIGHTS, call, items, read_keys

# The recorded hosts: node-a = 2x RTX 5080, node-b = 2x RTX 4070 Ti SUPER (tests/fixtures/nvml/).
PAIRS = {"node-a": ["node-a:cuda:0", "node-a:cuda:1"], "node-b": ["node-b:cuda:0", "node-b:cuda:1"]}


@pytest.fixture(scope="module")
def keys():
    return read_keys()


@pytest.fixture(scope="module")
def models(keys):
    return {m["name"]: m for m in items("/v2/models", keys["management"])}


def test_weights_are_read_from_the_inventory():
    assert ROUTE and WEIGHTS == {"node-a": 58, "node-b": 42}, (ROUTE, WEIGHTS)


@pytest.mark.parametrize("host", ["node-a", "node-b"])
def test_one_replica_per_pair_pinned_to_its_gpus(models, host):
    model = models.get(f"{ROUTE}-{host}")
    assert model, f"no replica for {host}: {sorted(models)}"
    assert model["gpu_selector"]["gpu_ids"] == PAIRS[host], model["gpu_selector"]
    assert model["replicas"] == 1
    assert model["distributed_inference_across_workers"] is False
    assert model["restart_on_error"] is True
    assert model["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert model["image_name"] == "localhost/pairserve-vllm-cpu:0.27.1"
    # The checkpoint is the pinned, hardlinked export of the lab hub's commit, per node.
    assert re.search(rf"/var/lib/pairserve-lab/{host}/hf-cache/.*/export/[0-9a-f]{{40}}$", model["local_path"]), model["local_path"]


def test_every_replica_instance_runs_on_its_own_worker(keys):
    running = {i["model_name"]: i for i in items("/v2/model-instances", keys["management"])}
    for host in PAIRS:
        inst = running.get(f"{ROUTE}-{host}")
        assert inst, f"no instance of {ROUTE}-{host}: {sorted(running)}"
        assert inst["state"] == "running", f"{inst['name']}: {inst['state']} {inst.get('state_message')}"
        assert inst["worker_name"] == host


def test_route_has_both_replicas_with_the_inventory_weights(keys, models):
    routes = [r for r in items("/v2/model-routes", keys["management"]) if r["name"] == ROUTE]
    assert len(routes) == 1, routes
    targets = [t for t in items(f"/v2/model-route-targets?route_id={routes[0]['id']}", keys["management"])
               if t["route_id"] == routes[0]["id"]]
    by_model = {t["model_id"]: t["weight"] for t in targets}
    assert by_model == {models[f"{ROUTE}-{h}"]["id"]: w for h, w in WEIGHTS.items()}, targets


def _served(port):
    """Successful requests a replica has served, from its own vLLM /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def test_requests_through_the_route_reach_both_replicas(keys):
    ports = {i["model_name"]: i["port"] for i in items("/v2/model-instances", keys["management"])}
    before = {name: _served(port) for name, port in ports.items()}
    answers = []
    for n in range(16):
        status, body = call("/v1/chat/completions", keys["inference"], {
            "model": ROUTE, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": f"Is the pair ready? ({n})"}]})
        assert status == 200, body
        answers.append(body["choices"][0]["message"])
    served = {name: _served(port) - before[name] for name, port in ports.items()}
    # 16 requests at 58/42: both replicas get some unless the route ignores a target (p < 1e-3 by chance).
    assert sum(served.values()) == 16, served
    assert all(count > 0 for count in served.values()), served
    assert all(a.get("content") is not None or a.get("reasoning_content") for a in answers)


def test_the_route_needs_a_valid_key():
    status, _body = call("/v1/chat/completions", "sk-pairserve-not-a-key",
                         {"model": ROUTE, "messages": [{"role": "user", "content": "hi"}]})
    assert status == 401
