"""GPUStack 2.2.3 on Ubuntu 24.04 / Python 3.12: what scripts/gpu_proof/gpustack_py312.sh recorded, against the
collection's own code and files (docs/gpu-proof.md, "GPUStack 2.2.3 on Ubuntu 24.04 / Python 3.12").

tests/fixtures/gpu-proof/gpustack-py312-2026-12-02.json is one run on the lent H200 host (Ubuntu 24.04.3, its
Python 3.12.3, no systemd, no PostgreSQL, no network, no apt source, no python3-apt): GPUStack's venv built by the
gpustack_install role as a site runs it, straight through (its apt task skipped: dpkg had both packages), GPUStack's
own GPU collection on the real driver, and the `vllm serve` command GPUStack's vLLM backend built for the seed's two
replicas as the replica role rendered them. gpustack-py311-2026-12-02.json is the same script on the Debian 12
development machine (Python 3.11.2), the baseline the 3.12 run is compared with.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

# The collection resolves as ansible_collections.pairserve.llm through the link `make deps` creates.

from ansible_collections.pairserve.llm.plugins.module_utils import gpustack, nvml, vllm_args

REPO = Path(__file__).resolve().parents[4]

PROOF = REPO / "tests" / "fixtures" / "gpu-proof"
RECORDING = {"node-a": REPO / "tests" / "fixtures" / "nvml" / "node-a-2x5080.json",
             "node-b": REPO / "tests" / "fixtures" / "nvml" / "node-b-2x4070tis.json"}
ROLE = REPO / "roles" / "gpustack_install"


def _load(name):
    return json.loads((PROOF / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def py312():
    return _load("gpustack-py312-2026-12-02.json")


@pytest.fixture(scope="module")
def py311():
    return _load("gpustack-py311-2026-12-02.json")


def _pins(path):
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_canonical(name)] = version.strip()
    return pins


def _canonical(name):
    return name.strip().lower().replace("_", "-").replace(".", "-")


def _freeze(record):
    return dict((_canonical(line.split("==", 1)[0]), line.split("==", 1)[1]) for line in record["pip_freeze"])


def test_the_host_was_ubuntu_2404_with_python_312_and_no_systemd(py312):
    probe = py312["probe"]
    assert probe["os"]["output"] == "Ubuntu 24.04.3 LTS"
    assert probe["system_python"]["output"] == "3.12.3 /usr/bin/python3"
    assert probe["systemd_running"]["rc"] != 0 and probe["systemctl"]["rc"] != 0
    assert probe["postgresql"]["rc"] != 0 and probe["container_runtime"]["rc"] != 0
    assert py312["module_interpreter"] == "/usr/bin/python3"


APT_TASKS = ["pairserve.llm.gpustack_install : Look for the venv tooling",
             "pairserve.llm.gpustack_install : Install the venv tooling that is missing"]


def _task_statuses(attempt):
    return dict((t["task"], t["status"]) for t in attempt["tasks"])


def test_the_role_asks_dpkg_before_it_calls_apt():
    # The proof recorded the role's own two tasks (APT_TASKS); the same rule now lives in the private role
    # system_packages (one owner for every Debian package install), which the role imports first.
    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text(encoding="utf-8"))
    first = tasks[0]
    assert first["ansible.builtin.import_role"]["name"] == "pairserve.llm.system_packages"
    assert first["vars"]["pairserve_system_packages"] == ["python3-venv", "python3-pip"]
    assert tasks[1]["name"] == "Create the version directory"
    shared = yaml.safe_load((REPO / "roles" / "system_packages" / "tasks" / "main.yml").read_text(encoding="utf-8"))
    look, install = shared[0], next(t for t in shared if "ansible.builtin.apt" in t)
    assert look["ansible.builtin.command"]["argv"].startswith("{{ ['dpkg-query'")
    assert look["changed_when"] is False and look["failed_when"] is False
    assert shared.index(look) < shared.index(install) and "missing" in install["when"]
    main = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text(encoding="utf-8"))
    assert [t["ansible.builtin.import_tasks"] for t in main] == ["preflight.yml", "install.yml", "configure.yml"]


@pytest.mark.parametrize("record", ["py312", "py311"])
def test_the_role_as_a_site_runs_it_installed_and_converges(record, request):
    proof = request.getfixturevalue(record)
    # Attempt A is gpustack_install.yml: the whole role, no --start-at-task, no fallback around any of its tasks.
    assert proof["installed_by"] == "A-role" and proof["fallback"] is False
    assert not proof["installed_outside_the_role"]
    assert [a["name"] for a in proof["install_attempts"]] == ["A-role", "again-A-role"]
    first, again = proof["install_attempts"]
    assert first["rc"] == 0 and first["failed_task"] is None
    assert first["recap"]["device"]["failed"] == 0 and first["recap"]["device"]["changed"] == 4
    changed = [t["task"].split(" : ", 1)[-1] for t in first["tasks"] if t["status"] == "changed"]
    assert changed == ["Create the version directory", "Copy the constraints file of this version and Python",
                       "Install GPUStack into its own venv", "Make this version the current one"]
    # The second converge changes nothing, and skips the pip install.
    assert again["rc"] == 0 and again["recap"]["device"]["changed"] == 0 and again["recap"]["device"]["failed"] == 0
    assert _task_statuses(again)["pairserve.llm.gpustack_install : Install GPUStack into its own venv"] == "skipping"


@pytest.mark.parametrize("record", ["py312", "py311"])
def test_the_apt_task_was_skipped_without_calling_apt(record, request):
    proof = request.getfixturevalue(record)
    for attempt in proof["install_attempts"]:
        statuses = _task_statuses(attempt)
        assert [statuses[name] for name in APT_TASKS] == ["ok", "skipping"]
        # What dpkg answered the role: both packages installed (`ii`), so nothing was missing.
        answered = sorted(line.split()[:2] for line in attempt["tooling_dpkg"])
        assert answered == [["python3-pip", "ii"], ["python3-venv", "ii"]]
        assert attempt["apt_calls"] == [] and attempt["warnings"] == []
    # The pass-through in front of PATH was there and logs: its own check call is the only apt command of the run.
    assert "apt-get" in proof["apt_shim"]
    assert proof["apt_calls"] == [{"attempt": "check", "command": "apt-get --version"}]


def test_on_the_host_that_blocked_the_old_role_apt_stayed_untouched(py312):
    probe = py312["probe"]
    # What the old apt task (ansible.builtin.apt without dpkg first) needed and this host lacks: apt's Python binding,
    # and any package list to get it from. The role ran straight through and left both as they were.
    for when in ("", "_after"):
        assert probe["dpkg_python3-apt" + when]["output"].endswith("not-installed")
        assert probe["apt_lists" + when]["output"] == "0"
        assert probe["apt_stamp" + when]["rc"] != 0
    assert probe["system_python_apt"]["rc"] != 0


def test_the_role_built_the_venv_from_the_python_312_constraints(py312):
    fact = py312["gpustack_install_fact"]
    assert fact["python"] == "3.12" and fact["version"] == "2.2.3"
    assert fact["constraints"] == "py3.12/gpustack-2.2.3.constraints.txt"
    assert fact["venv"] == "/opt/gpustack/2.2.3/venv"
    assert (ROLE / "files" / fact["constraints"]).is_file()
    assert py312["wheelhouse"]["record"] == {
        "gpustack": "2.2.3", "python": "3.12", "constraints": "py3.12/gpustack-2.2.3.constraints.txt"}
    assert py312["current_link"] == "2.2.3"
    assert py312["gpustack_version"].startswith("v2.2.3 ")
    assert py312["venv_python"] == "Python 3.12.3"
    assert py312["pip_check"] == "No broken requirements found."


def test_the_venv_is_exactly_the_pinned_set(py312):
    pins = _pins(ROLE / "files" / "py3.12" / "gpustack-2.2.3.constraints.txt")
    freeze = _freeze(py312)
    assert len(pins) == 134
    assert {name: freeze.get(name) for name in pins} == pins
    # Besides the pins: GPUStack itself and the pip the venv was made with (Ubuntu's ensurepip: 24.0).
    assert {name: freeze[name] for name in set(freeze) - set(pins)} == {"gpustack": "2.2.3", "pip": "24.0"}


def test_python_311_and_312_venvs_differ_only_in_the_systems_pip(py311, py312):
    assert py311["probe"]["system_python"]["output"].startswith("3.11.")
    assert py311["gpustack_install_fact"]["constraints"] == "py3.11/gpustack-2.2.3.constraints.txt"
    assert _pins(ROLE / "files" / "py3.11" / "gpustack-2.2.3.constraints.txt") == \
        _pins(ROLE / "files" / "py3.12" / "gpustack-2.2.3.constraints.txt")
    old, new = _freeze(py311), _freeze(py312)
    assert sorted(set(old.items()) ^ set(new.items())) == [("pip", "23.0.1"), ("pip", "24.0")]
    assert py311["gpustack_version"] == py312["gpustack_version"]


def test_gpustacks_collector_and_gpu_pairs_name_the_same_gpu(py312):
    gpus = py312["gpus"]
    assert gpus["python"] == "3.12.3"
    collected, runtime, mine = gpus["collector"], gpus["runtime"], gpus["gpu_pairs"]
    assert len(collected) == len(runtime) == len(mine) == 1
    dev, raw, ours = collected[0], runtime[0], mine[0]
    smi_index, smi_uuid, smi_name, smi_driver = (s.strip() for s in py312["probe"]["nvidia_smi"]["output"].split(",")[:4])
    assert dev["uuid"] == raw["uuid"] == ours["uuid"] == smi_uuid
    # The index GPUStack's worker reports (what gpu_selector ids name) is the one gpu_pairs pins by.
    assert dev["index"] == raw["index"] == ours["gpustack_index"] == int(smi_index)
    assert dev["name"] == ours["name"] == smi_name == "NVIDIA H200"
    assert dev["driver_version"] == smi_driver
    assert dev["memory"]["total"] >> 20 == ours["memory_mib"] == raw["memory_mib"]
    assert raw["bdf"] == ours["bus_id"][4:]
    assert dev["compute_capability"] == "9.0" and dev["type"] == "cuda"
    # The same kind of host as the identity recording of 2026-12-01 (another machine, another UUID).
    identity = json.loads((REPO / "tests" / "fixtures" / "nvml" / "h200-identity-2026-12-01.json").read_text())
    assert identity["runtime"][0]["bdf"] == raw["bdf"] and identity["runtime"][0]["index"] == raw["index"]


@pytest.mark.parametrize("node", ["node-a", "node-b"])
def test_gpustack_serves_exactly_the_rendered_arguments(py312, node):
    replica = py312["replicas"][node]
    spec = replica["spec"]
    [rendered_spec] = spec["specs"]
    # The replica role's render on the device is the collection's render of the same inputs here.
    pair = nvml.gather({"PAIRSERVE_NVML_REPLAY": str(RECORDING[node])}, expected_pairs=1)["pairs"][0]
    ours = vllm_args.render(spec["profile"], spec["vllm_version"], spec["checkpoint"], pair)
    assert rendered_spec["argv"] == ours.argv
    assert rendered_spec["gpu_ids"] == ["%s:cuda:%d" % (node, i) for i in pair["gpustack_gpu_indexes"]]

    [built] = replica["gpustack"]["replicas"]
    assert replica["gpustack"]["python"] == "3.12.3"
    model_path = spec["model_path"]
    command = built["command"]
    assert command[:3] == ["vllm", "serve", model_path]
    # Our arguments, in our order, as one block; GPUStack adds its own before and after and repeats none of ours.
    start = command.index(ours.argv[0])
    assert command[start:start + len(ours.argv)] == ours.argv
    added = command[3:start] + command[start + len(ours.argv):]
    assert added == ["--disable-access-log-for-endpoints", "/metrics", "--enable-prompt-tokens-details",
                     "--host", "127.0.0.1", "--port", "40000", "--served-model-name", rendered_spec["name"]]
    flags = [arg.split("=", 1)[0] for arg in command if arg.startswith("--")]
    assert flags.count("--tensor-parallel-size") == 1
    assert "--tensor-parallel-size=%d" % len(pair["uuids"]) in command
    # Version-gated additions (vLLM >= 0.16.0, >= 0.9.0.1): GPUStack read the pinned backend version name
    # (<version>-<12 hex>-custom) as vLLM 0.25.1.
    assert built["backend_version"] == gpustack.pinned_backend_version(spec["vllm_version"], built["image"])
    assert built["injected_backend_parameters"][:2] == ["--disable-access-log-for-endpoints=/metrics",
                                                        "--enable-prompt-tokens-details"]
    # The replica's GPUs are the pair's, by GPUStack index; the env carries the collection's seed env.
    assert built["resources"] == {"nvidia.com/devices": ",".join(str(i) for i in pair["gpustack_gpu_indexes"])}
    assert [g["uuid"] for g in built["worker_gpus"]] == pair["uuids"]
    for key, value in gpustack.SEED_ENV.items():
        assert built["env"][key] == value
    assert built["model"]["gpu_selector"] == {"gpu_ids": rendered_spec["gpu_ids"], "gpus_per_replica": 2}
    assert built["model"]["distributed_inference_across_workers"] is False


@pytest.mark.parametrize("node", ["node-a", "node-b"])
def test_python_311_and_312_build_the_same_command(py311, py312, node):
    def normalised(record):
        built = record["replicas"][node]["gpustack"]["replicas"][0]
        path = record["replicas"][node]["spec"]["model_path"]
        env = dict(built["env"])
        cache = env.pop("VLLM_CACHE_ROOT")
        assert cache.endswith("/gpustack-data/cache/vllm")
        return [arg.replace(path, "<model>") for arg in built["command"]], env, built["resources"]

    assert normalised(py311) == normalised(py312)
