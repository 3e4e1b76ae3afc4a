#!/usr/bin/env python
"""GPUStack 2.2.3's worker side, run in GPUStack's own venv: the GPUs its worker collects and the `vllm serve`
command its vLLM backend builds for a replica the collection registers (docs/gpu-proof.md, the Python 3.12 section).

    python gpustack_worker_side.py gpus OUT.json
        GPUStack's own GPU collection (gpustack.detectors.detector_factory.DetectorFactory().detect_gpus(), what the
        worker's status collector reports to the server) next to gpustack-runtime's detect_devices() and gpu_pairs'
        inventory of the same NVML (scripts/gpu_proof/detect_identity.py), per GPU.

    python gpustack_worker_side.py seed-checkpoint DIR OUT.json
        Writes the seed checkpoint's small files (config.json, hf_quant_config.json, tokenizer and processor files as
        tests/support/checkpoint_repo.py makes them: a qwen3_5 hybrid with a vision tower and an MTP head, NVFP4) into
        DIR, no weights, and the checkpoint facts the checkpoint role would set for it (hub.describe_checkpoint) into
        OUT.json as {"pairserve_checkpoint": {...}} for ansible-playbook -e @OUT.json.

    python gpustack_worker_side.py report WORKDIR OUT.json INSTALLED INTERPRETER PREFIX WHEELHOUSE
        gpustack_py312.sh's results in one file: the host probe (before and after the role ran), every install
        attempt (return code, seconds, each task's status, the task that failed and its message, the recap, what dpkg
        answered the role, every apt command its modules ran), whether a fallback around a task of the role was used,
        the version, pip check, pip freeze against the constraints file the role chose, the GPU collection, the replica
        specs and GPUStack's commands. Any Python.

    python gpustack_worker_side.py argv REPLICA.json OUT.json
        REPLICA.json is what the replica role rendered for one node (scripts/gpu_proof/replica_spec.yml): its
        pairserve_replica_specs, model path, env and the node's pairserve_gpu. For each spec this builds the model
        the role's gpustack_model task would register (the module's own desired_spec()), the model instance GPUStack's
        scheduler would make of its gpu_selector, the worker (its GPUs from DetectorFactory on this process's NVML) and
        the vLLM backend row with the runner image as a version (gpustack_backend_version's body), then runs
        GPUStack's VLLMServer(...).start() - the class the worker's serve manager starts - against an in-process
        stand-in for the server's REST client. The one thing replaced is gpustack_runtime's create_workload (no
        container runtime here): the workload plan it is handed is recorded instead of deployed.

The collection must be importable (ansible_collections/pairserve/llm on PYTHONPATH); `argv` also imports the
gpustack_model module, so ansible-core must be importable too (appended to sys.path with PAIRSERVE_ANSIBLE_SITE).
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLUSTER_ID = 1
WORKER_ID = 1
# The port GPUStack's serve manager would assign (its first free one in the worker's range); any works.
SERVING_PORT = 40000


def _json(obj):
    return json.loads(json.dumps(obj, default=str))


def _dump(model):
    return model.model_dump(mode="json")


def collect_gpus():
    """What GPUStack's worker reports as its GPUs, from its own detector factory."""
    from gpustack.detectors.detector_factory import DetectorFactory  # pylint: disable=import-outside-toplevel

    return DetectorFactory().detect_gpus()


def cmd_gpus(out):
    sys.path.insert(0, str(HERE))
    import detect_identity  # pylint: disable=import-outside-toplevel

    started = time.monotonic()
    devices = collect_gpus()
    collector_s = time.monotonic() - started
    gpus, pairs = detect_identity.pairs_view()
    result = {
        "python": platform.python_version(),
        "collector": [_dump(d) for d in devices],
        "collector_seconds": round(collector_s, 2),
        "runtime": detect_identity.runtime_devices(),
        "gpu_pairs": gpus,
        "pairs": pairs,
    }
    Path(out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    for dev in result["collector"]:
        print("GPUStack collector: index %s uuid %s %s, %d MiB, cc %s, driver %s, CUDA %s"
              % (dev["index"], dev["uuid"], dev["name"], dev["memory"]["total"] >> 20, dev["compute_capability"],
                 dev["driver_version"], dev["runtime_version"]))
    return 0


class _Response:
    def __init__(self, payload):
        self._payload = payload

    def raise_for_status(self):
        return None

    def json(self):
        return self._payload


class _HttpxClient:
    def __init__(self, backends):
        self._backends = backends

    def get(self, path, **_kwargs):
        if path != "/inference-backends/all":
            raise KeyError("the in-process server answers /inference-backends/all only, not %s" % path)
        return _Response(self._backends)


class _HttpClient:
    def __init__(self, backends):
        self._client = _HttpxClient(backends)

    def get_httpx_client(self):
        return self._client


class _Workers:
    def __init__(self, worker):
        self._worker = worker

    def get(self, worker_id):
        return self._worker if worker_id == self._worker.id else None


class _Models:
    def __init__(self, model):
        self._model = model

    def get(self, id):  # pylint: disable=redefined-builtin
        # The server answers with a fresh copy each time (the worker edits backend_parameters in place).
        return self._model.model_copy(deep=True) if id == self._model.id else None


class _ModelInstances:
    """The instance's watch delivers its STARTING state (the model files are local: nothing to download)."""

    def __init__(self, instance):
        self.instance = instance
        self.updates = []

    def watch(self, callback=None, stop_condition=None, params=None):  # pylint: disable=unused-argument
        from gpustack.server.bus import Event, EventType  # pylint: disable=import-outside-toplevel

        event = Event(type=EventType.UPDATED, data=_dump(self.instance))
        if stop_condition is not None and not stop_condition(event):
            raise RuntimeError("the instance event did not stop the watch: %s" % event.data.get("state"))

    def get(self, id):  # pylint: disable=redefined-builtin
        return self.instance.model_copy(deep=True) if id == self.instance.id else None

    def update(self, id, model_update):  # pylint: disable=redefined-builtin
        self.updates.append({"id": id, "fields": _dump(model_update)})
        return model_update


class _ClientSet:
    def __init__(self, worker, model, instance, backends):
        self.workers = _Workers(worker)
        self.models = _Models(model)
        self.model_instances = _ModelInstances(instance)
        self.http_client = _HttpClient(backends)
        self.headers = {}


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def _model_params(replica, spec, backend_version):
    """The options roles/replica/tasks/main.yml passes to pairserve.llm.gpustack_model for one spec."""
    return {
        "name": spec["name"],
        "local_path": replica["model_path"],
        "replicas": 1,
        "backend": "vLLM",
        "backend_version": backend_version,
        "backend_parameters": spec["argv"],
        "env": dict((k, str(v)) for k, v in (replica["env"] or {}).items()),
        "restart_on_error": True,
        "description": "pairserve replica: %s pair %s (%s profile)" % (replica["host"], spec["pair"], spec["profile"]),
        "image_name": None,
        "run_command": None,
        "gpu_ids": spec["gpu_ids"],
        "gpus_per_replica": spec["gpus"],
    }


def build_one(replica, spec, gpu_devices, runner_image, data_dir):
    # pylint: disable=import-outside-toplevel,too-many-locals
    from gpustack.config.config import Config
    from gpustack.schemas.inference_backend import BackendSourceEnum, get_built_in_backend
    from gpustack.schemas.models import ModelInstancePublic, ModelInstanceStateEnum, ModelPublic
    from gpustack.schemas.workers import WorkerPublic, WorkerStatus
    from gpustack.utils.gpu import parse_gpu_id
    from gpustack.worker.backends import vllm as vllm_backend
    from gpustack.worker.inference_backend_manager import InferenceBackendManager

    from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import pinned_backend_version
    from ansible_collections.pairserve.llm.plugins.modules.gpustack_model import desired_spec

    version = pinned_backend_version(replica["vllm_version"], runner_image)
    desired = desired_spec(_model_params(replica, spec, version), CLUSTER_ID)
    now = _now()
    model = ModelPublic.model_validate(dict(desired, id=1, created_at=now, updated_at=now))

    # The server's vLLM row (its built-in backend, as the server seeds it) with the runner image as a user-defined
    # version: the body gpustack_backend_version sends.
    row = next(b for b in get_built_in_backend() if b.backend_name == "vLLM")
    row.backend_source = BackendSourceEnum.BUILT_IN
    row.enabled = True
    row_json = _dump(row)
    row_json["version_configs"] = {version: {"image_name": runner_image, "custom_framework": "cuda"}}

    worker_name = spec["gpu_ids"][0].rsplit(":", 2)[0]
    status = WorkerStatus.get_default_status()
    status.gpu_devices = gpu_devices
    worker = WorkerPublic.model_validate({
        "id": WORKER_ID, "name": worker_name, "hostname": worker_name, "ip": "127.0.0.1", "ifname": "lo",
        "port": 10150, "cluster_id": CLUSTER_ID, "state": "ready", "status": _dump(status),
        "created_at": now, "updated_at": now})

    # What GPUStack's scheduler makes of a gpu_selector on one worker: the instance on that worker with the
    # selected GPUs' indexes (gpustack.utils.gpu.parse_gpu_id, the server's own parser).
    indexes = []
    for gpu_id in spec["gpu_ids"]:
        ok, parsed = parse_gpu_id(gpu_id)
        if not ok:
            raise ValueError("gpu id %r is not worker:device:index" % gpu_id)
        indexes.append(int(parsed["gpu_index"]))
    instance = ModelInstancePublic.model_validate({
        "id": 1, "name": "%s-0" % model.name, "model_id": model.id, "model_name": model.name,
        "worker_id": WORKER_ID, "worker_name": worker_name, "worker_ip": "127.0.0.1",
        "port": SERVING_PORT, "ports": [SERVING_PORT], "gpu_indexes": indexes, "gpu_type": "cuda",
        "state": ModelInstanceStateEnum.STARTING.value, "resolved_path": replica["model_path"],
        "backend": model.backend, "backend_version": model.backend_version, "cluster_id": CLUSTER_ID,
        "source": "local_path", "local_path": replica["model_path"], "created_at": now, "updated_at": now})

    clientset = _ClientSet(worker, model, instance, [row_json])
    cfg = Config(data_dir=data_dir, server_url="http://127.0.0.1:30080", token="in-process")
    backends = InferenceBackendManager(clientset)

    planned = []
    real_create = vllm_backend.create_workload
    vllm_backend.create_workload = planned.append
    try:
        server = vllm_backend.VLLMServer(clientset, instance, cfg, WORKER_ID,
                                         backends.get_backend_by_name("vLLM", model.owner_principal_id), None)
        server.start()
    finally:
        vllm_backend.create_workload = real_create
    if len(planned) != 1:
        raise RuntimeError("VLLMServer.start() handed %d workload plans to the runtime, expected 1" % len(planned))
    plan = planned[0]
    container = plan.containers[0]
    execution = container.execution
    injected = [u["fields"].get("injected_backend_parameters") for u in clientset.model_instances.updates
                if u["fields"].get("injected_backend_parameters")]
    return {
        "name": spec["name"],
        "gpu_ids": spec["gpu_ids"],
        "rendered_argv": spec["argv"],
        "model": _dump(model),
        "backend_version": version,
        "image": container.image,
        "command": list(execution.command or []),
        "args": list(execution.args or []),
        "injected_backend_parameters": injected[-1] if injected else None,
        "env": dict((e.name, e.value) for e in container.envs),
        "resources": _json(dict(container.resources or {})),
        "mounts": [_json(m.__dict__ if hasattr(m, "__dict__") else m) for m in container.mounts or []],
        "ports": [p.internal for p in container.ports or []],
        "workload_plan_type": type(plan).__name__,
        "worker_gpus": [{"index": d.index, "uuid": d.uuid, "name": d.name} for d in gpu_devices],
    }


def cmd_argv(replica_file, out):
    sys.path.extend(p for p in os.environ.get("PAIRSERVE_ANSIBLE_SITE", "").split(os.pathsep) if p)
    replica = json.loads(Path(replica_file).read_text())
    runner_image = os.environ["PAIRSERVE_PROOF_RUNNER_IMAGE"]
    data_dir = os.environ.get("PAIRSERVE_PROOF_DATA_DIR", "/tmp/pairserve-gpustack-data")
    replay = os.environ.get("PAIRSERVE_NVML_REPLAY")
    # GPUStack copies the worker's environment into the replica's (filter_env_vars): this script's own variables
    # are not a worker's (the replay is installed already, sys.path is set).
    for name in [n for n in os.environ if n.startswith("PAIRSERVE_") or n == "PYTHONPATH"]:
        del os.environ[name]
    gpu_devices = collect_gpus()
    result = {"python": platform.python_version(), "host": replica["host"],
              "nvml_replay": replay, "replicas": []}
    for spec in replica["specs"]:
        built = build_one(replica, spec, copy.deepcopy(gpu_devices), runner_image, data_dir)
        result["replicas"].append(built)
        print("%s: %s %s" % (built["name"], " ".join(built["command"]), " ".join(built["args"])))
    Path(out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


def cmd_seed_checkpoint(directory, out):
    sys.path.insert(0, str(HERE.parents[1]))
    # pylint: disable=import-outside-toplevel
    from support import checkpoint_repo

    from ansible_collections.pairserve.llm.plugins.module_utils import hub

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for name, item in checkpoint_repo.files(shard_bytes=16).items():
        if not item.lfs:
            (target / name).write_bytes(item.data)
    facts = hub.describe_checkpoint(str(target))
    # The fact the checkpoint role sets (roles/checkpoint/tasks/configure.yml) for an export directory.
    fact = {"path": str(target), "snapshot_path": str(target), "repo": checkpoint_repo.REPO_ID,
            "revision": checkpoint_repo.COMMIT_B}
    fact.update((k, facts.get(k)) for k in ("architecture", "model_type", "hybrid", "quantization", "vision", "mtp",
                                            "native_context"))
    Path(out).write_text(json.dumps({"pairserve_checkpoint": fact}, indent=1) + "\n")
    print("seed checkpoint facts: %s" % json.dumps(fact, sort_keys=True))
    return 0


def _read(path):
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _read_json(path):
    text = _read(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        return {"unreadable": str(exc)}


# The default callback's result lines: `ok: [host]`, `changed: [host]`, `skipping: [host]`, `fatal: [host]: FAILED!`.
RESULT_STATUSES = ("ok", "changed", "skipping", "fatal", "failed", "ignoring")


def ansible_log_summary(text):
    """Each task's status, the task that failed, its message block and the recap lines of a default-callback
    ansible-playbook log."""
    lines = (text or "").splitlines()
    task = failed = None
    message = []
    recap = []
    tasks = []
    for i, line in enumerate(lines):
        if line.startswith("TASK [") or line.startswith("RUNNING HANDLER ["):
            task = line.split("[", 1)[1].rsplit("]", 1)[0]
        status = line.split(":", 1)[0]
        if task is not None and status in RESULT_STATUSES and line[len(status):].startswith(": ["):
            tasks.append({"task": task, "status": status})
        if failed is None and (line.startswith("fatal:") or line.startswith("failed:")):
            failed = task
            for follow in lines[i:]:
                if follow.startswith(("TASK [", "PLAY RECAP", "RUNNING HANDLER [", "NO MORE HOSTS")) or \
                        (message and not follow.strip()):
                    break
                message.append(follow)
        if line.startswith("PLAY RECAP"):
            recap = [r.strip() for r in lines[i + 1:] if r.strip()]
    counts = {}
    for entry in recap:
        host, rest = entry.split(":", 1) if ":" in entry else (entry, "")
        counts[host.strip()] = dict((k, int(v)) for k, v in (kv.split("=") for kv in rest.split()) if v.isdigit())
    warnings = [ln for ln in lines if ln.startswith("[WARNING]")]
    return {"failed_task": failed, "message": "\n".join(message)[:4000] or None, "recap": counts,
            "warnings": warnings[:20], "tasks": tasks}


def _pins(text):
    pins = {}
    for line in (text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-").replace(".", "-")] = version.strip()
    return pins


def cmd_report(work, out, installed, interpreter, prefix, wheelhouse):
    # pylint: disable=too-many-locals
    work = Path(work)
    probe = {}
    for line in (_read(work / "probe.tsv") or "").splitlines():
        key, rc, output = (line.split("\t", 2) + ["", ""])[:3]
        probe[key] = {"rc": int(rc) if rc.lstrip("-").isdigit() else rc, "output": output.strip()}
    steps = []
    for line in (_read(work / "steps.tsv") or "").splitlines():
        name, rc, seconds = line.split("\t")
        steps.append({"step": name, "rc": int(rc), "seconds": float(seconds)})
    # Every apt command the role's modules ran, by attempt (gpustack_py312.sh's pass-through in front of PATH).
    apt_calls = []
    for line in (_read(work / "apt-calls.tsv") or "").splitlines():
        name, command = (line.split("\t", 1) + [""])[:2]
        apt_calls.append({"attempt": name, "command": command})
    attempts = []
    for step in steps:
        if step["step"].startswith("install:"):
            name = step["step"].split(":", 1)[1]
            summary = ansible_log_summary(_read(work / ("install-%s.log" % name)))
            written = _read_json(work / ("gpustack_install-fact-%s.json" % name)) or {}
            attempts.append(dict(step, name=name, **summary, tooling_dpkg=written.get("tooling_dpkg"),
                                 apt_calls=[c["command"] for c in apt_calls if c["attempt"] == name]))
    fact = _read_json(work / ("gpustack_install-fact-%s.json" % installed)) if installed else None
    fact = fact or _read_json(work / "gpustack_install-preflight.json")
    freeze_text = _read(work / "pip-freeze.txt")
    freeze = _pins(freeze_text)
    constraints = None
    if fact and "pairserve_gpustack_install" in fact:
        rel = fact["pairserve_gpustack_install"]["constraints"]
        path = HERE.parents[1] / "roles" / "gpustack_install" / "files" / rel
        pins = _pins(_read(path))
        constraints = {
            "file": "roles/gpustack_install/files/%s" % rel,
            "pins": len(pins),
            "missing_from_venv": sorted(set(pins) - set(freeze)),
            "not_pinned": sorted(set(freeze) - set(pins)),
            "different": dict((k, [pins[k], freeze[k]]) for k in sorted(set(pins) & set(freeze)) if pins[k] != freeze[k]),
        }
    record = {
        "format": "pairserve-gpustack-python-proof/2",
        "recorded_at": _now(),
        "host": platform.node(),
        "probe": probe,
        "ansible": (_read(work / "ansible-version.txt") or "").splitlines()[:1],
        "module_interpreter": interpreter,
        "wheelhouse": {"path": wheelhouse, "wheels": len(list(Path(wheelhouse).glob("*.whl"))),
                       "record": _read_json(Path(wheelhouse) / "pairserve-wheelhouse.json")},
        "prefix": prefix,
        "installed_by": installed or None,
        # A: the role as a site runs it. Anything else went around a task of the role (B, C, D) or by hand (E).
        "fallback": bool(installed) and installed != "A-role",
        "apt_shim": sorted(p.name for p in (work / "apt-shim").glob("*")),
        "apt_calls": apt_calls,
        "installed_outside_the_role": any(st["step"] == "by-hand:E" and st["rc"] == 0 for st in steps),
        "install_by_hand_log": (_read(work / "install-E-by-hand.log") or "")[-3000:] or None,
        "steps": steps,
        "install_attempts": attempts,
        "gpustack_install_fact": (fact or {}).get("pairserve_gpustack_install"),
        "gpustack_version": (_read(work / "gpustack-version.txt") or "").strip() or None,
        "gpustack_dash_version": (_read(work / "gpustack-dash-version.txt") or "").strip()[-600:] or None,
        "venv_python": (_read(work / "venv-python.txt") or "").strip() or None,
        "current_link": (_read(work / "current-link.txt") or "").strip() or None,
        "venv_mib": int((_read(work / "venv-mib.txt") or "0").strip() or 0),
        "pip_check": (_read(work / "pip-check.txt") or "").strip() or None,
        "pip_freeze": sorted((freeze_text or "").split()),
        "freeze_vs_constraints": constraints,
        "gpus": _read_json(work / "gpus.json"),
        "gpus_log": (_read(work / "gpus.log") or "")[-3000:],
        "checkpoint": (_read_json(work / "checkpoint.json") or {}).get("pairserve_checkpoint"),
        "replicas": dict((node, {"spec": _read_json(work / ("replica-%s.json" % node)),
                                 "gpustack": _read_json(work / ("argv-%s.json" % node)),
                                 "log": (_read(work / ("argv-%s.log" % node)) or "")[-3000:]})
                         for node in ("node-a", "node-b")),
    }
    for replica in record["replicas"].values():
        if replica["spec"]:
            replica["spec"].pop("gpu", None)  # the whole pairserve_gpu fact: the recording has it
    Path(out).write_text(json.dumps(record, indent=1, sort_keys=False, default=str) + "\n")
    print("installed by %s%s; apt commands run: %d; gpustack version: %s; freeze vs constraints: %s"
          % (installed or "nothing", " (a fallback)" if record["fallback"] else "", len(apt_calls),
             record["gpustack_version"], json.dumps(constraints)[:400]))
    return 0 if installed else 1


def main(argv):
    if len(argv) == 8 and argv[1] == "report":
        return cmd_report(*argv[2:])
    if len(argv) == 4 and argv[1] == "seed-checkpoint":
        return cmd_seed_checkpoint(argv[2], argv[3])
    if len(argv) == 3 and argv[1] == "gpus":
        return cmd_gpus(argv[2])
    if len(argv) == 4 and argv[1] == "argv":
        return cmd_argv(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
