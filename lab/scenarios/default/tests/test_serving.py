"""pytest-testinfra checks of the serving half of site.yml on the lab: replicas pinned to the recorded pairs,
the weighted route over both, and requests answered through the route by both replicas.

Runs on the controller against GPUStack on node-a (the lab shares the host's network, so 127.0.0.1:30080 is
node-a's API) and reads the secrets from the node the way an operator would.
"""

from __future__ import annotations

import re
import subprocess
import urllib.request

import pytest

from lab.api import ENGINES, ROUTE, WEIGHTS, call, items, lab_pins, read_keys, replica_container

PINS = lab_pins()

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
    # GPUStack's built-in vLLM backend, on the version that carries the pinned runner image (a vLLM model's own
    # image_name would be dropped by GPUStack at its first update).
    assert model["backend"] == "vLLM" and model["image_name"] is None and model["run_command"] is None
    assert model["backend_version"].startswith(PINS["pairserve_vllm_version"] + "-"), model["backend_version"]
    assert model["backend_version"].endswith("-custom"), model["backend_version"]
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


def _served(address):
    """Successful requests a replica has served, from its own vLLM /metrics (GPUStack's vLLM backend starts it
    with --host <worker IP>, as on a real node)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def test_requests_through_the_route_reach_both_replicas(keys):
    ports = {i["model_name"]: f"{i['worker_ip']}:{i['port']}" for i in items("/v2/model-instances", keys["management"])}
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


@pytest.mark.parametrize("host", ["node-a", "node-b"])
def test_replica_runs_the_pinned_vllm_from_the_registered_image(keys, models, host):
    model = models[f"{ROUTE}-{host}"]
    status, backend = call("/v2/inference-backends/backend_name/vLLM", keys["management"])
    assert status == 200, backend
    registered = backend["version_configs"][model["backend_version"]]
    # The pinned reference, digest included, as the runner_image role pulled it from the lab registry.
    assert registered["image_name"] == PINS["runner_reference"], registered
    instance = [i for i in items("/v2/model-instances", keys["management"]) if i["model_name"] == model["name"]][0]
    container = replica_container(instance["name"])
    # As run: the registered image, `vllm serve` built by GPUStack, the seed's environment.
    # The container runs the very image the registered digest reference names (compared by image id: podman shows
    # a pulled image under whichever of its names it has first, the digest reference or an older local name).
    assert registered["image_name"].endswith("@" + PINS["pairserve_runner_image_digest"]), registered
    engine = ENGINES[container["PairserveEngine"]]
    named = subprocess.run(engine + ["image", "inspect", "--format", "{{.Id}}", registered["image_name"]],
                           check=True, capture_output=True, text=True).stdout.strip()
    assert container["Image"] == named, (container["Image"], container.get("ImageName"), named)
    # podman 4.3 shows the entrypoint gpustack-runtime set as one string (Docker: a list).
    argv = []
    for part in (container["Config"].get("Entrypoint"), container["Config"].get("Cmd")):
        argv += part.split() if isinstance(part, str) else list(part or [])
    assert argv[:2] == ["vllm", "serve"], argv
    # GPUStack's own additions, then the rendered profile (lab: TP 1 over the recorded pair).
    assert "--enable-prompt-tokens-details" in argv and "--served-model-name" in argv, argv
    assert "--tensor-parallel-size=1" in argv, argv
    env = dict(e.split("=", 1) for e in container["Config"]["Env"])
    assert env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID", env
    assert env.get("PYTORCH_ALLOC_CONF") == "expandable_segments:True", env
    version = subprocess.run(engine + ["exec", container["Id"], "vllm", "--version"], check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
    # The CPU build reports <version>+cpu, as vLLM's own CPU builds do.
    assert version.split("+")[0] == PINS["pairserve_vllm_version"], version
