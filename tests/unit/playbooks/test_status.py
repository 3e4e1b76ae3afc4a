"""The status table and what is down (module_utils/status.py), and playbooks/status.yml over a fake GPUStack.

The records have the shape GPUStack 2.2.3 answers with: workers with `state` and `status.gpu_devices` (the GPU
entries of its own collector on the real H200 host, tests/fixtures/gpu-proof/, with the recorded cards' UUIDs of
tests/fixtures/nvml/), models with `gpu_selector` and a pinned `backend_version`, instances with `state`,
`worker_name`, `gpu_indexes` and `restart_count`, routes with their `route_targets`, and the vLLM backend's
`version_configs` (schemas/models.py, workers.py, model_routes.py, inference_backend.py of the 2.2.3 wheel).
"""

from __future__ import annotations

import copy
import datetime
import json
import re
import socket
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.pairserve.llm.plugins.module_utils import status
from lab import pins
from support.ansible_runner import REPO, run_playbook
from support.local_http import JsonStub, gpustack_page
from support.recap import parse_recap

PROOF = REPO / "tests" / "fixtures" / "gpu-proof" / "gpustack-py312-2026-12-02.json"
NVML = REPO / "tests" / "fixtures" / "nvml"
RECORDINGS = {"node-a": NVML / "node-a-2x5080.json", "node-b": NVML / "node-b-2x4070tis.json"}
# The lab's registrations: its pinned runner image by digest, registered as a version of its pinned vLLM.
VERSION = pins.VLLM + "-0123456789ab-custom"
IMAGE = pins.RUNNER_IMAGE + "@sha256:" + "ab" * 32
WEIGHTS = {"node-a": 58, "node-b": 42}
STATUS = REPO / "playbooks" / "status.yml"


def devices(host: str) -> list:
    """The worker record's GPUs: the collector's entry, once per recorded card."""
    template = json.loads(PROOF.read_text())["gpus"]["collector"][0]
    found = []
    for card in json.loads(RECORDINGS[host].read_text())["devices"]:
        dev = copy.deepcopy(template)
        dev.update(index=card["Index"], device_index=card["Index"], uuid=card["UUID"], name=card["Name"])
        found.append(dev)
    return found


def uuids(host: str) -> list:
    return [card["UUID"] for card in json.loads(RECORDINGS[host].read_text())["devices"]]


def cluster() -> dict:
    """Both nodes up: two ready workers, one running replica per pair, the weighted route over both."""
    hosts = ["node-a", "node-b"]
    workers = [{"id": n + 1, "name": h, "state": "ready", "state_message": None, "cluster_id": 1,
                "status": {"gpu_devices": devices(h)}} for n, h in enumerate(hosts)]
    gpus = [dict(dev, worker_name=w["name"], worker_id=w["id"]) for w in workers for dev in w["status"]["gpu_devices"]]
    models = [{"id": n + 7, "name": "qwen-%s" % h, "replicas": 1, "ready_replicas": 1, "cluster_id": 1,
               "backend": "vLLM", "backend_version": VERSION, "image_name": None, "run_command": None,
               "restart_on_error": True,
               "gpu_selector": {"gpu_ids": ["%s:cuda:0" % h, "%s:cuda:1" % h], "gpus_per_replica": 2}}
              for n, h in enumerate(hosts)]
    instances = [{"id": n + 4, "name": "qwen-%s-%s" % (h, "AbCd"[n * 2:n * 2 + 2]), "model_id": n + 7,
                  "model_name": "qwen-%s" % h, "worker_id": n + 1, "worker_name": h, "worker_ip": "10.0.0.%d" % n,
                  "port": 40000 + n, "state": "running", "state_message": None, "gpu_indexes": [0, 1],
                  "restart_count": 0, "backend": "vLLM", "backend_version": VERSION, "cluster_id": 1}
                 for n, h in enumerate(hosts)]
    targets = [{"id": n + 11, "name": "qwen-%s" % h, "route_id": 1, "route_name": "qwen", "model_id": n + 7,
                "provider_id": None, "weight": WEIGHTS[h], "fallback_status_codes": None, "state": "active"}
               for n, h in enumerate(hosts)]
    routes = [{"id": 1, "name": "qwen", "targets": 2, "ready_targets": 2, "route_targets": targets}]
    backends = [{"id": 3, "backend_name": "vLLM", "backend_source": "built-in",
                 "version_configs": {VERSION: {"image_name": IMAGE, "custom_framework": "cuda",
                                               "built_in_frameworks": None}}}]
    return {"workers": workers, "gpus": gpus, "models": models, "model_instances": instances, "routes": routes,
            "inference_backends": backends}


def instance(info: dict, model: str) -> dict:
    return [i for i in info["model_instances"] if i["model_name"] == model][0]


DF = "   1B-blocks       Avail Mounted on\n%d %d /var/lib/pairserve\n" % (500 << 30, 123 << 30)
NODES = [{"host": h, "path": "/var/lib/pairserve/hf-cache", "rc": 0, "stdout": DF, "stderr": ""}
         for h in ("node-a", "node-b")]
EXPECTED = {"node-a": "", "node-b": ""}
PASSED = {"result": "passed", "started_at": "2026-12-03T10:00:00Z", "finished_at": "2026-12-03T10:04:10Z",
          "routes": [{"name": "qwen", "models": ["qwen-node-a", "qwen-node-b"]}],
          "checks": {"qwen": ["text", "tool_call", "context_near_limit", "context_past_limit", "token_count"]}}


def test_all_up_has_no_problem_and_shows_every_part_of_the_table():
    got = status.cluster_status(cluster(), NODES, PASSED, EXPECTED)
    assert not got["problems"], got["problems"]
    text = "\n".join(got["lines"])
    assert [w["gpu_count"] for w in got["workers"]] == [2, 2]
    for host in ("node-a", "node-b"):
        row = [r for r in got["replicas"] if r["model"] == "qwen-%s" % host][0]
        assert row["state"] == "running" and row["node"] == host and row["restarts"] == 0
        # By UUID, from the gpu_selector ids looked up in the worker record.
        assert [g["uuid"] for g in row["gpus"]] == uuids(host)
        assert row["image"] == IMAGE and row["backend_version"] == VERSION
        for uuid in uuids(host):
            assert uuid in text
    targets = {(r["target"], r["weight"], r["running"]) for r in got["routes"]}
    assert targets == {("qwen-node-a", 58, 1), ("qwen-node-b", 42, 1)}
    assert got["verify"]["text"].startswith("passed at 2026-12-03T10:04:10Z: qwen (qwen-node-a, qwen-node-b)")
    disks = [(d["host"], d["avail"], d["size"]) for d in got["disks"]]
    assert disks == [("node-a", 123 << 30, 500 << 30), ("node-b", 123 << 30, 500 << 30)]
    assert "123.0 GiB" in text and "500.0 GiB" in text
    assert got["lines"][-1].strip().startswith("none:")
    # One section per part, in the order docs/status.md shows them.
    sections = [line for line in got["lines"] if not line.startswith(" ")]
    assert sections == ["Workers", "Replicas", "Routes", "Last verify", "Checkpoint cache disk", "Problems"]
    replica_line = [line for line in got["lines"] if line.lstrip().startswith("qwen-node-a ")][0]
    assert re.search(r"qwen-node-a\s+%s\s+running\s+node-a\s+%s\s+0\s+%s\s+%s$" % (
        instance(cluster(), "qwen-node-a")["name"], uuids("node-a")[0], VERSION, re.escape(IMAGE)), replica_line)


def test_one_instance_stopped_is_named_with_its_state_and_its_route_target():
    info = cluster()
    stopped = instance(info, "qwen-node-b")
    stopped.update(state="error", state_message="container exited with code 137", restart_count=2)
    problems = status.cluster_status(info, NODES, PASSED, EXPECTED)["problems"]
    assert problems == [
        "replica qwen-node-b: instance %s is error on node-b after 2 restart(s): container exited with code 137"
        % stopped["name"],
        "route qwen: target qwen-node-b (weight 42) has no running instance",
    ]


def test_a_worker_not_ready_is_named_and_so_is_a_gpu_node_without_a_worker():
    info = cluster()
    info["workers"][1].update(state="not_ready", state_message="Heartbeat lost")
    problems = status.cluster_status(info, NODES, None, dict(EXPECTED, **{"node-c": "node-c"}))["problems"]
    assert problems == ["worker node-b is not_ready: Heartbeat lost",
                        "worker node-c (GPU node node-c) is not registered in GPUStack",
                        "GPU node node-c was not reached, so its disk was not read"]


def test_a_route_target_whose_model_has_no_instance_is_named():
    info = cluster()
    info["model_instances"] = [i for i in info["model_instances"] if i["model_name"] != "qwen-node-a"]
    got = status.cluster_status(info, NODES, None, EXPECTED)
    assert got["problems"] == ["replica qwen-node-a has no instance (it asks for 1)",
                               "route qwen: target qwen-node-a (weight 58) has no running instance"]
    row = [r for r in got["replicas"] if r["model"] == "qwen-node-a"][0]
    # The pinned cards are still shown, from the selector.
    assert row["state"] == "no instance" and [g["uuid"] for g in row["gpus"]] == uuids("node-a")


def test_a_route_with_no_running_target_says_every_request_fails():
    info = cluster()
    for inst in info["model_instances"]:
        inst["state"] = "starting"
    problems = status.cluster_status(info, NODES, None, EXPECTED)["problems"]
    assert problems[-1] == "route qwen has no running target: every request to it fails"
    assert len(problems) == 5


def test_a_replica_the_controller_put_to_sleep_is_asleep_not_down():
    info = cluster()
    info["model_instances"] = [i for i in info["model_instances"] if i["model_name"] != "qwen-node-b"]
    info["models"][1]["replicas"] = 0
    info["routes"][0]["route_targets"][1]["weight"] = 0
    got = status.cluster_status(info, NODES, None, EXPECTED)
    assert not got["problems"], got["problems"]
    assert [r["state"] for r in got["replicas"] if r["model"] == "qwen-node-b"] == ["asleep (replicas 0)"]
    # Asleep with a share of the route's requests: those requests fail.
    info["routes"][0]["route_targets"][1]["weight"] = 42
    assert status.cluster_status(info, NODES, None, EXPECTED)["problems"] == [
        "route qwen: target qwen-node-b (weight 42) has no running instance"]


def test_no_verify_record_reads_not_recorded_and_a_started_one_never_passed():
    assert status.cluster_status(cluster(), NODES, None, EXPECTED)["verify"]["text"] == "not recorded"
    started = dict(PASSED, result="started", finished_at=None, checks={})
    text = status.cluster_status(cluster(), NODES, started, EXPECTED)["verify"]["text"]
    assert text.startswith("started at 2026-12-03T10:00:00Z and never passed")


def test_disk_errors_and_unreached_nodes_are_shown_not_hidden():
    nodes = [dict(NODES[0], rc=1, stdout="", stderr="df: /var/lib/pairserve/hf-cache: No such file or directory")]
    got = status.cluster_status(cluster(), nodes, None, EXPECTED)
    assert [(d["host"], d["error"]) for d in got["disks"]] == [
        ("node-a", "df: /var/lib/pairserve/hf-cache: No such file or directory"),
        ("node-b", "not read (the host was not reached)")]
    # A missing cache is shown; an unreached node is listed too (Ansible fails the run for it anyway).
    assert got["problems"] == ["GPU node node-b was not reached, so its disk was not read"]


def test_an_unregistered_backend_version_and_a_custom_image_are_told_apart():
    info = cluster()
    info["inference_backends"][0]["version_configs"] = {}
    info["models"][1].update(backend="Custom", backend_version=None, image_name="localhost/pairserve/vllm-cpu:0.27.1")
    rows = {r["model"]: r["image"] for r in status.cluster_status(info, NODES, None, EXPECTED)["replicas"]}
    assert rows == {"qwen-node-a": "? (version %s is not registered in the vLLM backend)" % VERSION,
                    "qwen-node-b": "localhost/pairserve/vllm-cpu:0.27.1"}


def test_a_gpu_pinned_to_an_index_the_worker_does_not_report_is_shown_as_such():
    info = cluster()
    info["models"][0]["gpu_selector"]["gpu_ids"] = ["node-a:cuda:0", "node-a:cuda:5"]
    got = status.cluster_status(info, NODES, None, EXPECTED)
    row = [r for r in got["replicas"] if r["model"] == "qwen-node-a"][0]
    assert [g["uuid"] for g in row["gpus"]] == [uuids("node-a")[0], None]
    assert any("node-a:cuda:5 (not on the worker)" in line for line in got["lines"])


@pytest.mark.parametrize("stdout", ["", "Filesystem\n", "   1B-blocks       Avail Mounted on\nx y /\n"])
def test_df_output_of_another_shape_is_an_error_not_a_figure(stdout):
    with pytest.raises(ValueError):
        status.parse_df(stdout)


# -- playbooks/status.yml over a fake GPUStack, every host local -----------------------------------------------

class FakeGpuStack(JsonStub):
    """GPUStack's list endpoints (paginated bodies) over ``info``, which a test may change between runs."""

    def __init__(self, info: dict):
        self.info = info
        super().__init__(self.answer)

    def answer(self, request):
        listed = self.listed(request.path, request.query)
        return (404, {"detail": "not found"}) if listed is None else (200, gpustack_page(listed))

    def listed(self, path: str, query: dict):
        if path == "/v2/model-route-targets":
            route = int(query["route_id"][0])
            return [t for r in self.info["routes"] if r["id"] == route for t in r["route_targets"]]
        if path == "/v2/model-routes":
            return [dict((k, v) for k, v in r.items() if k != "route_targets") for r in self.info["routes"]]
        lists = {"/v2/workers": "workers", "/v2/gpu-devices": "gpus", "/v2/models": "models",
                 "/v2/model-instances": "model_instances", "/v2/inference-backends": "inference_backends"}
        return self.info[lists[path]] if path in lists else None


@pytest.fixture(name="fake")
def fixture_fake():
    server = FakeGpuStack(cluster())
    yield server
    server.close()


def inventory(tmp_path: Path, port: int) -> Path:
    caches = {h: tmp_path / h / "hf-cache" for h in ("node-a", "node-b")}
    for path in caches.values():
        path.mkdir(parents=True)
    hosts = {h: {"pairserve_checkpoint_cache_dir": str(p)} for h, p in caches.items()}
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps({"all": {
        "children": {"gpustack_server": {"hosts": {"node-a": {}}}, "gpu_nodes": {"hosts": hosts}},
        "vars": {"ansible_connection": "local", "pairserve_gpustack_api_port": port,
                 "pairserve_gpustack_management_key": "gpustack_fake_management",
                 "pairserve_gpustack_inference_key": "gpustack_fake_inference",
                 "pairserve_verify_record_path": str(tmp_path / "verify-last.json")}}}))
    return path


def recap(stdout: str) -> dict:
    parsed = parse_recap(stdout)
    assert parsed, "no PLAY RECAP: the play did not finish\n" + stdout[-3000:]
    return parsed


def test_the_play_prints_the_table_changes_nothing_and_passes_when_all_is_up(tmp_path, fake):
    hosts = inventory(tmp_path, fake.port)
    for check in (False, True):
        run = run_playbook(STATUS, inventory=hosts, check=check)
        assert run.rc == 0, run.stdout[-4000:] + run.stderr[-2000:]
        assert all(c["changed"] == 0 and c["failed"] == 0 for c in recap(run.stdout).values()), run.stdout[-1500:]
        for uuid in uuids("node-a") + uuids("node-b"):
            assert uuid in run.stdout
        assert "not recorded" in run.stdout and "Up: every worker is ready" in run.stdout
        # Both nodes' caches were measured.
        assert len(re.findall(r"node-[ab]\s+%s/node-[ab]/hf-cache\s+\d+\.\d GiB" % re.escape(str(tmp_path)),
                              run.stdout)) == 2, run.stdout[-3000:]


def test_the_play_fails_naming_the_stopped_replica(tmp_path, fake):
    hosts = inventory(tmp_path, fake.port)
    stopped = instance(fake.info, "qwen-node-a")
    stopped["state"] = "error"
    run = run_playbook(STATUS, inventory=hosts)
    assert run.rc == 2, run.stdout[-4000:]
    # The failure lists what is down, one line each.
    assert re.search(r"^\s+Down:\n\s+- replica qwen-node-a: instance %s is error on node-a\n\s+- route qwen: target "
                     r"qwen-node-a \(weight 58\) has no running instance$" % stopped["name"], run.stdout, re.M), \
        run.stdout[-3000:]
    assert recap(run.stdout)["node-a"]["changed"] == 0


def test_the_verify_roles_record_is_what_the_play_shows(tmp_path, fake):
    """roles/verify writes the record (record.yml, as after every check passed); status.yml reads it back."""
    hosts = inventory(tmp_path, fake.port)
    book = tmp_path / "record.yml"
    book.write_text(json.dumps([{
        "hosts": "node-a", "gather_facts": False,
        "tasks": [{"name": "Record as verify does", "ansible.builtin.include_role": {
            "name": "pairserve.llm.verify", "tasks_from": "record.yml"},
            "vars": {"pairserve_verify_record_result": "passed", "pairserve_verify_started_at": "2026-12-03T10:00:00Z",
                     "pairserve_verify_routes": [{"name": "qwen", "models": ["qwen-node-a", "qwen-node-b"],
                                                  "max_model_len": 4096}],
                     "_pairserve_verify_results": {"results": [{"item": {"name": "qwen"},
                                                               "checks": [{"check": "text"}, {"check": "context"}]}]}}}]
    }]))
    wrote = run_playbook(book, inventory=hosts)
    assert wrote.rc == 0, wrote.stdout[-3000:]
    assert recap(wrote.stdout)["node-a"]["changed"] == 0
    record = json.loads((tmp_path / "verify-last.json").read_text())
    assert record["result"] == "passed" and record["checks"] == {"qwen": ["text", "context"]}
    assert record["routes"] == [{"name": "qwen", "models": ["qwen-node-a", "qwen-node-b"]}]
    run = run_playbook(STATUS, inventory=hosts)
    assert run.rc == 0, run.stdout[-3000:]
    assert re.search(r"passed at %s: qwen \(qwen-node-a, qwen-node-b\)" % re.escape(record["finished_at"]),
                     run.stdout), run.stdout[-3000:]


# -- a worker GPUStack still calls ready, that does not answer ------------------------------------------------------

def test_a_worker_that_does_not_answer_leads_the_problems_and_its_instances_do_not_count_as_running():
    info = cluster()
    reach = {"node-a": {"url": "http://10.0.0.1:10150/healthz", "ok": True, "error": None},
             "node-b": {"url": "http://10.0.0.2:10170/healthz", "ok": False, "error": "Connection refused"}}
    result = status.cluster_status(info, [], None, {}, reach)
    assert result["problems"][0] == ("[node-b] the worker at http://10.0.0.2:10170 does not answer (Connection refused): "
                                     "GPUStack reaches its replicas only through it; GPUStack still says ready")
    assert "replica qwen-node-b: instance %s cannot serve: the worker of node-b does not answer" % (
        instance(info, "qwen-node-b")["name"]) in result["problems"]
    assert "route qwen: target qwen-node-b (weight 42) has no running instance" in result["problems"]
    assert [w["state"] for w in result["workers"]] == ["ready", "unreachable (GPUStack: ready)"]
    assert [r["state"] for r in result["replicas"]] == ["running", "unreachable (GPUStack: running)"]
    assert [r["running"] for r in result["routes"]] == [1, 0]
    # once GPUStack's syncer has marked it as well (the lab's faults scenario met this within a minute)
    marked = copy.deepcopy(info)
    next(w for w in marked["workers"] if w["name"] == "node-b")["state"] = "unreachable"
    assert status.cluster_status(marked, [], None, {}, reach)["problems"][0].endswith(
        "only through it; GPUStack says unreachable too")
    # without probes (or every worker answering) nothing changes
    assert status.cluster_status(info, [], None, {}, {})["problems"] == []


def test_the_play_asks_each_worker_and_names_the_node_whose_worker_is_down(tmp_path, fake):
    with JsonStub(lambda r: (200, {})) as node_a_worker:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            dead = sock.getsockname()[1]
        for worker, port in zip(fake.info["workers"], (node_a_worker.port, dead)):
            worker.update(ip="127.0.0.1", port=port)
        run = run_playbook(STATUS, inventory=inventory(tmp_path, fake.port))
        assert [r.path for r in node_a_worker.seen] == ["/healthz"]
    assert run.rc == 2, run.stdout[-4000:]
    assert re.search(r"^\s+Down:\n\s+- \[node-b\] the worker at http://127\.0\.0\.1:%d does not answer \(" % dead,
                     run.stdout, re.M), run.stdout[-3000:]
    assert "unreachable (GPUStack: ready)" in run.stdout and "unreachable (GPUStack: running)" in run.stdout
    assert recap(run.stdout)["node-a"]["changed"] == 0


# -- the HTTPS certificate the server serves, and its CA -------------------------------------------------------------

def self_signed(cn: str, days: float, ca: bool = False) -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=400))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_the_play_shows_days_left_warns_under_the_threshold_and_fails_on_an_expired_certificate(tmp_path, fake):
    hosts = inventory(tmp_path, fake.port)
    tls_dir, ca_file = tmp_path / "tls", tmp_path / "ca.crt"
    tls_dir.mkdir()
    ca_file.write_text(self_signed("pairserve test CA", 3650.5, ca=True))
    (tls_dir / "gpustack.crt").write_text(self_signed("node-a", 10.5))
    extra = {"pairserve_gpustack_tls_dir": str(tls_dir), "pairserve_gpustack_tls_ca_file": str(ca_file)}
    soon = run_playbook(STATUS, inventory=hosts, extra_vars=extra)
    assert soon.rc == 0, soon.stdout[-4000:]
    assert "HTTPS certificate CN=node-a: 10 day(s) left" in soon.stdout, soon.stdout[-3000:]
    assert "HTTPS CA CN=pairserve test CA: 3650 day(s) left" in soon.stdout
    assert re.search(r"WARNING, HTTPS certificate expires soon:\n\s+- HTTPS certificate CN=node-a: 10 day\(s\) left",
                     soon.stdout), soon.stdout[-3000:]
    assert "CN=pairserve test CA: 3650 day(s) left, until" in soon.stdout and "fewer than 30 days: rotate" in soon.stdout
    # The threshold is the inventory's; an expired certificate is down.
    calm = run_playbook(STATUS, inventory=hosts, extra_vars=dict(extra, pairserve_tls_warn_days=7))
    assert calm.rc == 0 and "WARNING, HTTPS" not in calm.stdout, calm.stdout[-3000:]
    (tls_dir / "gpustack.crt").write_text(self_signed("node-a", -1.5))
    expired = run_playbook(STATUS, inventory=hosts, extra_vars=extra)
    assert expired.rc == 2, expired.stdout[-3000:]
    assert re.search(r"Down:\n\s+- HTTPS certificate CN=node-a: EXPIRED, until", expired.stdout), expired.stdout[-3000:]
