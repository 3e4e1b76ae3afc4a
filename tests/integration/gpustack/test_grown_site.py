"""A grown site against a real GPUStack 2.2.3: three GPU nodes, one of them holding two pairs (issue 42, part 3).

Three more workers of the tier's server, each DETECTING the GPUs of a recorded host through gpustack-runtime over
the NVML replay, as the lab's workers do: node-a (the seed's 2x RTX 5080), node-b (the seed's 2x RTX 4070 Ti
SUPER) and node-c (four GPUs: 2x RTX A6000 interleaved with 2x RTX 4090 on the bus, so its two pairs are not bus
neighbours). The GPU nodes' play is the collection's own: gpu_pairs over each recording, then playbooks/serve.yml
(its replica play and its route play; the checkpoint download and the runner image pull are skipped by tag, their
facts are the inventory's). The route's weights are the bench's: the replicas' throughput turned into weights by
llm_bench's rule (module_utils/_bench_measure.py), kept per host and per pair in the inventory file the bench writes
(module_utils/bench_weights.py, module vars_file_entry). Then playbooks/status.yml over the whole site, and the
bench's preflight, which names every replica of the route as GPUStack has it.

No replica can start here (no container runtime): everything is checked at GPUStack's API, where the collection
registers it. Cost: three workers starting side by side (~30 s on 2 cores) and three playbook runs.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
import yaml

from ansible_collections.pairserve.llm.plugins.module_utils import _bench_measure, bench_weights, replica_names
from lab import pins
from support.ansible_runner import REPO, run_module, run_playbook
from support.recap import parse_recap

pytestmark = pytest.mark.slow

NVML = REPO / "tests" / "fixtures" / "nvml"
NODE_PYTHON = REPO / ".cache" / "recorded-node-venv" / "bin" / "python"
MODEL = "grow"  # pairserve_model_name and the route's name
HOSTS = {"node-a": NVML / "node-a-2x5080.json", "node-b": NVML / "node-b-2x4070tis.json",
         "node-c": NVML / "four-gpus-two-models.json"}
PAIRS = {"node-a": 1, "node-b": 1, "node-c": 2}
# Worker names of their own: other files of the tier use node-a and node-b for theirs.
WORKERS = {host: "grow-" + host for host in HOSTS}
# Throughput at concurrency 8 (tok/s) per replica: node-a's and node-b's are the seed's measurements (244 and 177,
# its 58/42 split); node-c is a hand-written host, so are the figures of its two pairs (the A6000 pair slower than
# the 4090 pair). The bench turns them into weights by one rule; the pairs of node-c measured differently, so the
# inventory keeps them per pair.
THROUGHPUT = {"grow-node-a": 244.0, "grow-node-b": 177.0, "grow-node-c": 230.0, "grow-node-c-p1": 310.0}
SERVE = REPO / "playbooks" / "serve.yml"
STATUS = REPO / "playbooks" / "status.yml"


def uuids(recording):
    return [d["UUID"] for d in json.loads(recording.read_text())["devices"]]


@pytest.fixture(scope="module")
def site(gpustack_server, tmp_path_factory):
    """The three workers ready with their recorded GPUs, the inventory of the grown site, the measured weights in
    its group_vars (written as the bench writes them). Everything registered is removed afterwards."""
    server = gpustack_server
    tmp = tmp_path_factory.mktemp("grown-site")
    workers = server.start_workers({WORKERS[h]: path for h, path in HOSTS.items()})

    checkpoint = tmp / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"]}))
    inventory_dir = tmp / "inventory"
    (inventory_dir / "group_vars" / "all").mkdir(parents=True)
    inventory = {"all": {
        "children": {
            "gpustack_server": {"hosts": {"gs": {
                "pairserve_gpustack_api_port": int(server.api_url.rsplit(":", 1)[1]),
                "pairserve_gpustack_management_key": server.api_key,
                "pairserve_gpustack_inference_key": server.api_key,
                "pairserve_gpustack_server_url": server.api_url,
                "pairserve_gpustack_cluster_name": server.cluster_name}}},
            "gpu_nodes": {"hosts": {host: {
                "pairserve_gpustack_worker_name": WORKERS[host],
                "pairserve_gpustack_worker_port": workers[WORKERS[host]].port,
                "pairserve_nvml_replay": str(path),
                "pairserve_expected_pairs": PAIRS[host]} for host, path in HOSTS.items()}}},
        "vars": {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "pairserve_node_venv": str(NODE_PYTHON.parent.parent),
            "pairserve_node_python": str(NODE_PYTHON),
            "pairserve_vllm_version": pins.VLLM,
            "pairserve_checkpoint": {"path": str(checkpoint), "architecture": "Qwen3_5ForConditionalGeneration",
                                     "hybrid": True, "quantization": "nvfp4", "vision": True, "mtp": True,
                                     "native_context": 262144},
            "pairserve_checkpoint_cache_dir": str(tmp),
            "pairserve_runner_image_ref": "docker.io/vllm/vllm-openai:v%s@sha256:%s" % (pins.VLLM, "7" * 64),
            "pairserve_model_name": MODEL,
            "pairserve_route_name": MODEL,
            "pairserve_replica_profile": "multimodal",
            "pairserve_verify_record_path": "",
        }}}
    (inventory_dir / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))

    # What the bench does with its measurements: llm_bench's weights, kept per host (per pair where a host's pairs
    # measured differently) in the inventory file pairserve_bench_weights_file names.
    measured = _bench_measure.weights(THROUGHPUT)
    plan = bench_weights.keep_plan(measured, list(HOSTS), MODEL, "", {}, MODEL)
    assert plan["problem"] is None, plan
    written = run_module("vars_file_entry", {"path": str(inventory_dir / "group_vars" / "all" / "route_weights.yml"),
                                             "key": "pairserve_route_weights", "value": plan["host_weights"]})
    assert written.changed, written.result

    playbook = tmp / "grown.yml"
    playbook.write_text(yaml.safe_dump([
        {"name": "Detect the GPU pairs of every GPU node (as the preflight play of site.yml does)",
         "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
             {"name": "Inventory the GPUs and group them into pairs",
              "pairserve.llm.gpu_pairs": {"group_size": 2, "expected_pairs": "{{ pairserve_expected_pairs }}"},
              "environment": {"PAIRSERVE_NVML_REPLAY": "{{ pairserve_nvml_replay }}"},
              "vars": {"ansible_python_interpreter": "{{ pairserve_node_python }}"}}]},
        {"ansible.builtin.import_playbook": str(SERVE)},
    ], sort_keys=False))
    state = {"server": server, "workers": workers, "inventory": inventory_dir / "hosts.yml", "playbook": playbook,
             "measured": measured, "host_weights": plan["host_weights"], "tmp": tmp}
    yield state

    run_module("gpustack_route", {**server.key_args, "name": MODEL, "state": "absent"})
    for model in [m["name"] for m in server.items("/v2/models") if m["name"].startswith(MODEL + "-")]:
        run_module("gpustack_model", {**server.key_args, "name": model, "state": "absent"})
    server.stop_workers(list(workers.values()))


def serve(site):
    # The checkpoint download and the runner image pull are the inventory's facts here (no hub, no registry).
    return run_playbook(site["playbook"], inventory=site["inventory"], env={"ANSIBLE_SKIP_TAGS": "checkpoint,runner_image"},
                        timeout=900)


def pinned(server):
    """{replica: [(worker, index, UUID) of each GPU its gpu_selector pins]} from GPUStack's records."""
    devices = {}
    for worker in server.items("/v2/workers"):
        for dev in (worker.get("status") or {}).get("gpu_devices") or []:
            devices[(worker["name"], dev["index"])] = dev["uuid"]
    out = {}
    for model in server.items("/v2/models"):
        if model["name"].startswith(MODEL + "-"):
            ids = [re.match(r"^(.+):cuda:(\d+)$", gid).groups() for gid in model["gpu_selector"]["gpu_ids"]]
            out[model["name"]] = [(w, int(i), devices.get((w, int(i)))) for w, i in ids]
    return out


def route_weights(server):
    names = dict((m["id"], m["name"]) for m in server.items("/v2/models"))
    route = [r for r in server.items("/v2/model-routes") if r["name"] == MODEL][0]
    return dict((names[t["model_id"]], t["weight"]) for t in server.items(f"/v2/model-route-targets?route_id={route['id']}")
                if t["route_id"] == route["id"])


def test_three_nodes_one_with_two_pairs_registered_pinned_and_routed(site):
    server = site["server"]
    # Each worker detected its recorded GPUs, with the recording's UUIDs at the NVML index.
    for host, path in HOSTS.items():
        record = [w for w in server.items("/v2/workers") if w["name"] == WORKERS[host]][0]
        assert [d["uuid"] for d in record["status"]["gpu_devices"]] == uuids(path), record["status"]["gpu_devices"]

    res = serve(site)
    assert res.rc == 0, res.stdout[-5000:] + res.stderr[-2000:]

    # gpu_pairs found both pairs of node-c, by model, not by bus order: the A6000s at 0 and 2, the 4090s at 1 and 3.
    pairs = dict((r["_host"], r["ansible_facts"]["pairserve_gpu"]["pairs"]) for r in res.results
                 if r["_task"] == "Inventory the GPUs and group them into pairs")
    assert {h: len(p) for h, p in pairs.items()} == PAIRS, pairs
    assert [(p["name"], p["gpustack_gpu_indexes"]) for p in pairs["node-c"]] == [
        ("NVIDIA RTX A6000", [0, 2]), ("NVIDIA GeForce RTX 4090", [1, 3])]

    # One replica per pair, named by the one rule, each pinned to its pair's cards on its own node's worker.
    expected = dict((replica_names.replica_name(MODEL, host, p["index"]), (host, p)) for host in HOSTS
                    for p in pairs[host])
    assert sorted(expected) == sorted(THROUGHPUT)
    found = pinned(server)
    assert sorted(found) == sorted(expected), found
    for name, (host, pair) in expected.items():
        assert found[name] == [(WORKERS[host], i, u) for i, u in zip(pair["gpustack_gpu_indexes"], pair["uuids"])]
    # Every GPU of the site pinned exactly once.
    every = [u for gpus in found.values() for _w, _i, u in gpus]
    assert sorted(every) == sorted(u for path in HOSTS.values() for u in uuids(path)) and len(set(every)) == 8

    # The route over all four replicas, with the weights the throughput gave, node-c's pairs each their own.
    assert site["host_weights"] == {"node-a": 25, "node-b": 19, "node-c": [24, 32]}
    assert route_weights(server) == site["measured"] == {"grow-node-a": 25, "grow-node-b": 19, "grow-node-c": 24,
                                                         "grow-node-c-p1": 32}

    again = serve(site)
    assert again.rc == 0, again.stdout[-5000:]
    assert all(c["changed"] == 0 for c in parse_recap(again.stdout).values()), again.stdout[-3000:]


def test_status_shows_the_whole_site(site):
    server = site["server"]
    if len(pinned(server)) != 4:
        assert serve(site).rc == 0
    res = run_playbook(STATUS, inventory=site["inventory"], timeout=600)
    status = [r for r in res.results if r["_task"] == "Build the status table"][0]["ansible_facts"]["pairserve_status"]
    workers = dict((w["name"], w) for w in status["workers"])
    for host, path in HOSTS.items():
        assert [g["uuid"] for g in workers[WORKERS[host]]["gpus"]] == uuids(path)
    replicas = dict((r["model"], r) for r in status["replicas"] if r["model"].startswith(MODEL + "-"))
    assert sorted(replicas) == sorted(THROUGHPUT)
    assert dict((n, [g["uuid"] for g in r["gpus"]]) for n, r in replicas.items()) == dict(
        (n, [u for _w, _i, u in gpus]) for n, gpus in pinned(server).items())
    assert dict((r["target"], r["weight"]) for r in status["routes"] if r["route"] == MODEL) == site["measured"]
    # Both of node-c's pairs in the topology table; every node's disk read.
    assert sorted((t["host"], t["pair"]) for t in status["topology"]) == [
        ("node-a", 0), ("node-b", 0), ("node-c", 0), ("node-c", 1)]
    assert sorted(d["host"] for d in status["disks"]) == sorted(HOSTS)
    # No replica can run here: status says so for each of them and fails, naming them; it names no node as missing.
    assert res.rc != 0
    for name in THROUGHPUT:
        assert any(name in p for p in status["problems"]), status["problems"]
    assert not [p for p in status["problems"] if any(w in p and "worker" in p and "not" in p for w in WORKERS.values())
                and "instance" not in p], status["problems"]


def test_the_bench_measures_every_replica_of_the_route_and_applies_no_partial_weights(site):
    """The bench's replicas are the route's targets as GPUStack has them (all four, not the seed's two), and weights
    measured for only some of them are refused before the route changes (they would replace its targets)."""
    server = site["server"]
    if len(pinned(server)) != 4:
        assert serve(site).rc == 0
    before = route_weights(server)
    book = site["tmp"] / "bench.yml"
    book.write_text(yaml.safe_dump([{
        "name": "The bench's preflight, then weights measured for three of the four replicas",
        "hosts": "gpustack_server", "gather_facts": False,
        "vars": {"pairserve_bench_gpustack_api_url": server.api_url, "pairserve_bench_gpustack_api_key": server.api_key,
                 "pairserve_bench_route": MODEL, "pairserve_bench_measure_route": False,
                 "pairserve_bench_apply_weights": True},
        "tasks": [
            {"name": "Preflight", "ansible.builtin.include_role": {"name": "pairserve.llm.bench", "tasks_from": "preflight"}},
            {"name": "Apply", "ansible.builtin.include_role": {"name": "pairserve.llm.bench", "tasks_from": "weights"},
             "vars": {"_pairserve_bench_baseline": {"weights": {"grow-node-a": 30, "grow-node-b": 30, "grow-node-c": 40}}}},
        ]}], sort_keys=False))
    res = run_playbook(book, inventory=site["inventory"], timeout=300)
    named = [r for r in res.results if r["_task"] == "Name the replicas behind the route"][0]["ansible_facts"]
    assert named["pairserve_bench_replicas"] == sorted(THROUGHPUT), named
    assert res.rc != 0 and "also sends requests to grow-node-c-p1, which this run did not measure" in res.stdout, \
        res.stdout[-3000:]
    assert route_weights(server) == before
