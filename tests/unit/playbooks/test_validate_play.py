"""The validation play: one site.yml run over an inventory with many mistakes lists every one, with its host and
variable, and nothing else runs; plus the rules of inventory_check on their own."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from lab import pins
from support.ansible_runner import REPO

from ansible_collections.pairserve.llm.plugins.module_utils.inventory_check import problems, report  # noqa: E402
from support.inventory_views import GOOD_VIEW, GROUPS
from support.many_mistakes import EXPECTED, MISTAKES, PROBLEM_RE, reported


def test_site_yml_lists_every_mistake_and_changes_nothing():
    run = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(MISTAKES / "hosts.yml"),
                          str(REPO / "site.yml")], cwd=REPO, capture_output=True, text=True, check=False,
                         env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1"),
                         timeout=300)
    out = re.sub(r"\s+", " ", run.stdout)
    assert run.returncode != 0, run.stdout[-3000:]
    found = reported(run.stdout)
    assert EXPECTED <= found, "not reported: %s\n%s" % (sorted(EXPECTED - found), run.stdout[-4000:])
    assert len(EXPECTED) >= 15
    route = re.search(r"node-a: pairserve_route_weights: node-x is not a host", out)
    # node-c is left out of the weights: it gets 50, as the route role gives it (routes.weight_problems, one rule)
    assert route and "node-b: -1 is not a whole number" in out and "node-c" not in route.group(0)
    assert "no weight for node-c" not in out
    # One problem a line, naming where to fix it; a problem shared by hosts is one line naming them all.
    lines = set(line.strip() for line in run.stdout.splitlines() if re.match(PROBLEM_RE, line))
    assert lines and all(line.endswith("]") and "[fix in: " in line for line in lines), lines
    assert len(lines) == len(set(line.split(": ", 1)[1] for line in lines)), lines
    # Stopped in the validation play: no host was contacted, nothing else ran.
    assert "UNREACHABLE" not in run.stdout and "Preflight every node" not in run.stdout, run.stdout[-3000:]
    assert re.search(r"node-a\s*: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", run.stdout), run.stdout[-1500:]
    assert "vault" in out and "FASTEST_FIRST" in out


# The sound two-node views every rule test changes one variable of (tests/support/inventory_views.py).


def check(**changes):
    views = {h: copy.deepcopy(GOOD_VIEW) for h in ("node-a", "node-b")}
    for key, value in changes.items():
        host, var = key.split("__")
        views[host.replace("_", "-")][var] = value
    return [(p["host"], p["variable"]) for p in problems(views, GROUPS, ["2.2.3", "2.3.0"])]


def test_the_seed_inventory_has_no_problem():
    assert check() == []


@pytest.mark.parametrize("changes,expected", [
    ({"node_b__pairserve_vllm_version": "0.27.1"}, ("all", "pairserve_vllm_version")),
    ({"node_b__pairserve_replica_profile": "text"}, ("node-a", "pairserve_serving_mode")),
    ({"node_a__pairserve_serving_mode": "split"}, ("node-a", "pairserve_serving_mode")),
    ({"node_a__pairserve_serving_mode": "splt"}, ("node-a", "pairserve_serving_mode")),
    ({"node_a__pairserve_route_weights": {"node-a": 0, "node-b": 0}}, ("node-a", "pairserve_route_weights")),
    ({"node_a__pairserve_route_weights": {"node-a": 58, "node-b": 4.2}}, ("node-a", "pairserve_route_weights")),
    # One rule with the route role and the docs (routes.weight_problems): a host left out gets 50, {} splits evenly.
    ({"node_a__pairserve_route_weights": {}}, None),
    ({"node_a__pairserve_route_weights": {"node-a": 58}}, None),
    ({"node_a__pairserve_route_weights": {"node-a": 0}}, None),
    ({"node_a__pairserve_route_weights": {"node-x": 10}}, ("node-a", "pairserve_route_weights")),
    # The routes verify checks name the GPU nodes' replicas (a renamed host fails here, not after the install).
    ({"node_a__pairserve_verify_routes": [{"name": "qwen", "models": ["qwen-node-a", "qwen-node-b"]}]}, None),
    ({"node_a__pairserve_verify_routes": [{"name": "qwen", "models": ["qwen-node-a", "qwen-node-b-p1",
                                                                      "qwen-node-b"]}]}, None),
    ({"node_a__pairserve_verify_routes": [{"name": "qwen", "models": ["qwen-gpu1", "qwen-node-b"]}]},
     ("node-a", "pairserve_verify_routes")),
    ({"node_a__pairserve_verify_routes": [{"name": "qwen", "models": ["qwen-node-a"]}]},
     ("node-a", "pairserve_verify_routes")),
    ({"node_a__pairserve_verify_routes": [{"name": "qwen-vision", "models": ["qwen-node-a", "qwen-node-b"]}]},
     ("node-a", "pairserve_verify_routes")),
    ({"node_a__pairserve_serving_mode": "split", "node_b__pairserve_replica_profile": "text",
      "node_a__pairserve_split_routes": {"multimodal": "qwen-vision", "text": "qwen-text"},
      "node_a__pairserve_verify_routes": [{"name": "qwen-vision", "models": ["qwen-node-a"]},
                                          {"name": "qwen-text", "models": ["qwen-node-b"]}]}, None),
    # The worker tools archive: there, and for the nodes' platform, before anything is installed.
    ({"node_b__pairserve_gpustack_tools_archive": "/nonexistent/tools.tar.gz"},
     ("node-b", "pairserve_gpustack_tools_archive")),
    ({"node_b__pairserve_replica_env": {"PYTORCH_ALLOC_CONF": "garbage"}}, ("node-b", "pairserve_replica_env")),
    ({"node_b__pairserve_gpustack_worker_name": "node-a"}, ("node-b", "pairserve_gpustack_worker_name")),
    ({"node_b__pairserve_profiles": {"agents": {"max_model_len": 90000}}}, None),
    ({"node_b__pairserve_profiles": {"agents": {"pipeline_parallel_size": 2}},
      "node_b__pairserve_replica_profile": "agents", "node_a__pairserve_serving_mode": "split"},
     ("node-b", "pairserve_profiles")),
    # Defined with no settings and no base: the same refusal as the replica role's, on the variable to fix.
    ({"node_b__pairserve_profiles": {"agents": {}}, "node_b__pairserve_replica_profile": "agents",
      "node_a__pairserve_serving_mode": "split"}, ("node-b", "pairserve_profiles")),
    ({"node_a__pairserve_runner_image": "docker.io/gpustack/runner:cuda12.9-vllm0.25.1@sha256:" + "0" * 64},
     ("node-a", "pairserve_runner_image")),
    ({"node_a__pairserve_gpustack_admin_password_set": False}, ("node-a", "pairserve_gpustack_admin_password")),
    # The drained restart's own switch, set for every run: each registration would restart undrained.
    ({"node_b__pairserve_replica_restart": True}, ("node-b", "pairserve_replica_restart")),
    ({"node_b__pairserve_replica_restart": False}, None),
    # The file the bench keeps its measured weights in: a .yml/.yaml path, absolute or inventory-relative.
    ({"node_a__pairserve_bench_weights_file": "weights.json", "node_a__inventory_dir": "/tmp"},
     ("node-a", "pairserve_bench_weights_file")),
    ({"node_a__pairserve_bench_weights_file": "w.yml", "node_a__inventory_dir": None},
     ("node-a", "pairserve_bench_weights_file")),
    ({"node_a__pairserve_bench_weights_file": "/nonexistent-dir/w.yml"}, ("node-a", "pairserve_bench_weights_file")),
    ({"node_a__pairserve_bench_weights_file": "/tmp/w.yml", "node_a__pairserve_serving_mode": "split",
      "node_b__pairserve_replica_profile": "text"}, ("node-a", "pairserve_bench_weights_file")),
    ({"node_a__pairserve_bench_weights_file": "w.yml", "node_a__inventory_dir": "/tmp"}, None),
    ({"node_a__pairserve_bench_weights_file": ""}, None),
    # gpustack-runtime's pause and health images: pinned by digest, the digest in its own variable.
    ({"node_b__pairserve_runtime_pause_image_digest": ""}, ("node-b", "pairserve_runtime_pause_image_digest")),
    ({"node_b__pairserve_runtime_pause_image": None}, ("node-b", "pairserve_runtime_pause_image")),
    ({"node_a__pairserve_runtime_health_image": "docker.io/gpustack/runtime:health@sha256:" + "2" * 64},
     ("node-a", "pairserve_runtime_health_image")),
    ({"node_a__pairserve_runtime_health_image_digest": "sha256:REPLACE-WITH-THE-DIGEST-OF-THE-HEALTH-IMAGE"},
     ("node-a", "pairserve_runtime_health_image_digest")),
    # The runtime and its endpoint; the worker environment the collection owns.
    ({"node_b__pairserve_runner_runtime": "containerd"}, ("node-b", "pairserve_runner_runtime")),
    ({"node_b__pairserve_runner_runtime_host": "run/podman.sock"}, ("node-b", "pairserve_runner_runtime_host")),
    ({"node_b__pairserve_runner_check_runtime_host": "run/docker.sock"}, ("node-b", "pairserve_runner_check_runtime_host")),
    ({"node_b__pairserve_runner_runtime": "podman",
      "node_b__pairserve_runner_runtime_host": "unix:///run/podman-gpu/podman.sock"}, None),
    ({"node_b__pairserve_gpustack_worker_env": {"GPUSTACK_RUNTIME_PODMAN_HOST": "http+unix:///x.sock"}},
     ("node-b", "pairserve_gpustack_worker_env")),
    ({"node_b__pairserve_gpustack_worker_env": {"GPUSTACK_PROXY_TIMEOUT_SECONDS": "60"}},
     ("node-b", "pairserve_gpustack_worker_env")),
    ({"node_b__pairserve_gpustack_worker_env": {"DOCKER_HOST": "tcp://10.0.0.1:2375"}},
     ("node-b", "pairserve_gpustack_worker_env")),
    ({"node_b__pairserve_gpustack_worker_env": ["GPUSTACK_RUNTIME_DEPLOY=Docker"]},
     ("node-b", "pairserve_gpustack_worker_env")),
    ({"node_b__pairserve_gpustack_worker_env": {"GPUSTACK_RUNTIME_DEPLOY_LABEL_PREFIX": "b.runtime.gpustack.ai"}},
     None),
])
def test_each_rule(changes, expected):
    found = check(**changes)
    if expected is None:
        assert found == []
    else:
        assert expected in found, found


# -- the controller's variables (checked on the server host when it is on) ------------------------------------------

CONTROLLER_ON = {
    "node_a__pairserve_controller_enabled": True, "node_a__pairserve_controller_mode": "both",
    "node_a__pairserve_controller_replicas": [
        {"name": "qwen-node-a", "prefill_tps": 2767, "decode_tps": 275, "metrics_url": "auto"},
        {"name": "qwen-node-b", "prefill_tps": 1823, "decode_tps": 220, "metrics_url": "auto"}],
    "node_a__pairserve_controller_sleep_replica": "qwen-node-b", "node_a__pairserve_controller_min_weight": 5,
    "node_a__pairserve_controller_max_weight": 95, "node_a__pairserve_controller_min_change": 5,
    "node_a__pairserve_controller_interval": 5, "node_a__pairserve_controller_hold": 15,
    "node_a__pairserve_controller_horizon": 30,
}


def _replicas(*changes):
    return [dict(r, **c) for r, c in zip(CONTROLLER_ON["node_a__pairserve_controller_replicas"], changes)]


def test_the_seed_controller_settings_have_no_problem():
    assert check(**CONTROLLER_ON) == []
    # off, its variables are not read at all
    assert check(**{**CONTROLLER_ON, "node_a__pairserve_controller_enabled": False,
                    "node_a__pairserve_controller_mode": "sleepy"}) == []


@pytest.mark.parametrize("changes,variable", [
    ({"node_a__pairserve_controller_mode": "sleepy"}, "pairserve_controller_mode"),
    ({"node_a__pairserve_controller_enabled": "true", "node_a__pairserve_controller_sleep_replica": "qwen-node-x"},
     "pairserve_controller_sleep_replica"),
    ({"node_a__pairserve_controller_replicas": _replicas({}, {"prefill_tps": 0})}, "pairserve_controller_replicas"),
    ({"node_a__pairserve_controller_replicas": _replicas({}, {"decode_tps": "fast"})}, "pairserve_controller_replicas"),
    ({"node_a__pairserve_controller_replicas": _replicas({}, {"name": "qwen-node-a"})}, "pairserve_controller_replicas"),
    ({"node_a__pairserve_controller_replicas": _replicas({}, {"static_weight": 42})}, "pairserve_controller_replicas"),
    ({"node_a__pairserve_controller_replicas": _replicas({}, {"name": "qwen-gpu-2"})}, "pairserve_controller_replicas"),
    ({"node_a__pairserve_controller_replicas": _replicas({}, {"name": "qwen-gpu-2", "host": "node-x"})},
     "pairserve_controller_replicas"),
    ({"node_a__pairserve_controller_replicas": "qwen-node-a,qwen-node-b"}, "pairserve_controller_replicas"),
    ({"node_a__pairserve_controller_replicas": _replicas({})}, "pairserve_controller_replicas"),
    ({"node_a__pairserve_controller_min_weight": 60, "node_a__pairserve_controller_max_weight": 40},
     "pairserve_controller_min_weight"),
    ({"node_a__pairserve_controller_min_change": -1}, "pairserve_controller_min_change"),
    ({"node_a__pairserve_controller_hold": 0}, "pairserve_controller_hold"),
    ({"node_a__pairserve_serving_mode": "split", "node_b__pairserve_replica_profile": "text"},
     "pairserve_controller_enabled"),
])
def test_each_controller_rule(changes, variable):
    assert ("node-a", variable) in check(**{**CONTROLLER_ON, **changes})


@pytest.mark.parametrize("changes, variable", [
    ({"node_a__pairserve_verify_reach_grace": -1}, "pairserve_verify_reach_grace"),
    ({"node_a__pairserve_verify_reach_grace": "soon"}, "pairserve_verify_reach_grace"),
    ({"node_a__pairserve_verify_poll_interval": 0}, "pairserve_verify_poll_interval"),
    ({"node_a__pairserve_verify_wait_timeout": 10}, "pairserve_verify_wait_timeout"),  # shorter than one poll (15)
    ({"node_a__pairserve_verify_wait_timeout": 1.5}, "pairserve_verify_wait_timeout"),
    ({"node_a__pairserve_verify_request_timeout": 0}, "pairserve_verify_request_timeout"),
])
def test_each_verify_timing_rule(changes, variable):
    assert check(**changes) == [("node-a", variable)]


# A YAML block scalar ends in a newline: "2.2.3\n" is not 2.2.3 to GPUStack, pip or a registry ("$" of Python's re
# matches before a trailing newline; the rules anchor with \Z).
@pytest.mark.parametrize("changes, variable", [
    ({"node_a__pairserve_gpustack_version": "2.2.3\n", "node_b__pairserve_gpustack_version": "2.2.3\n"},
     "pairserve_gpustack_version"),
    ({"node_a__pairserve_runner_image_digest": "sha256:" + "0" * 64 + "\n"}, "pairserve_runner_image_digest"),
    ({"node_a__pairserve_checkpoint_revision": "a" * 40 + "\n", "node_b__pairserve_checkpoint_revision": "a" * 40 + "\n"},
     "pairserve_checkpoint_revision"),
    ({"node_a__pairserve_route_name": "qwen\n"}, "pairserve_route_name"),
    ({"node_a__pairserve_firewall_table": "pairserve\n"}, "pairserve_firewall_table"),
])
def test_a_value_with_a_trailing_newline_is_refused(changes, variable):
    assert ("node-a", variable) in check(**changes)


def test_verify_timings_given_on_the_command_line_are_read_as_numbers():
    assert check(node_a__pairserve_verify_reach_grace="0", node_a__pairserve_verify_wait_timeout="15") == []
    # verify runs from the server host: another host's timings are not its
    assert check(node_b__pairserve_verify_reach_grace=-1) == []


def test_a_replica_named_otherwise_is_accepted_with_its_host():
    renamed = _replicas({}, {"name": "qwen-gpu-2", "host": "node-b"})
    assert check(**{**CONTROLLER_ON, "node_a__pairserve_controller_replicas": renamed,
                    "node_a__pairserve_controller_sleep_replica": "qwen-gpu-2"}) == []
    # a weights-only controller needs no second replica and no sleep replica among them
    assert check(**{**CONTROLLER_ON, "node_a__pairserve_controller_mode": "weights",
                    "node_a__pairserve_controller_replicas": _replicas({}),
                    "node_a__pairserve_controller_sleep_replica": "qwen-node-x"}) == []


# The lab's CPU image names no CUDA in its tag: the lab inventory sets the driver floor it stands in for.
LAB_IMAGE = {"node_a__pairserve_runner_image": "localhost/pairserve-vllm-cpu:" + pins.VLLM,
             "node_a__pairserve_runner_image_digest": "",
             "node_a__pairserve_preflight_driver_min_for_runner": "575.51.03"}


def test_lab_images_need_no_digest_in_lab_mode_only():
    lab = LAB_IMAGE
    assert ("node-a", "pairserve_runner_image_digest") in check(**lab)
    assert check(node_a__pairserve_lab_mode=True, **lab) == []


def test_lab_mode_given_as_a_string_on_the_command_line():
    lab = LAB_IMAGE
    assert ("node-a", "pairserve_runner_image_digest") in check(node_a__pairserve_lab_mode="false", **lab)
    assert check(node_a__pairserve_lab_mode="true", **lab) == []


def test_the_runner_images_driver_floor_is_known_before_anything_changes():
    # a mirror keeping GPUStack's tag: the floor comes from the CUDA the tag names, nothing to set
    assert check(node_a__pairserve_runner_image="registry.lan/gpustack/runner:cuda13.0-vllm0.25.1") == []
    # a rebuilt image whose tag names no CUDA: refused until the floor is set, then accepted
    own = {"node_b__pairserve_runner_image": "registry.lan/ml/vllm:0.25.1"}
    assert check(**own) == [("node-b", "pairserve_runner_image")]
    assert check(node_b__pairserve_preflight_driver_min_for_runner="580.65.06", **own) == []
    # CUDA the collection has no floor for, and a floor that is not a version: each names what to fix
    assert check(node_a__pairserve_runner_image="docker.io/gpustack/runner:cuda11.8-vllm0.25.1") == [
        ("node-a", "pairserve_runner_image")]
    assert check(node_a__pairserve_preflight_driver_min_for_runner="latest") == [
        ("node-a", "pairserve_preflight_driver_min_for_runner")]


# The roles that change a host; every play of control_plane.yml before the first one that runs them only checks.
INSTALL_ROLES = {"pairserve.llm.gpustack_install", "pairserve.llm.gpustack_server", "pairserve.llm.gpustack_worker"}


def _roles_of(tasks):
    for task in tasks or []:
        for key in ("ansible.builtin.import_role", "ansible.builtin.include_role", "import_role", "include_role"):
            if key in task:
                yield task[key]["name"]
        for key in ("block", "rescue", "always"):
            yield from _roles_of(task.get(key))


def _play_roles(play):
    roles = set(r if isinstance(r, str) else r.get("role") or r.get("name") for r in play.get("roles") or [])
    for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
        roles |= set(_roles_of(play.get(key)))
    return roles


def test_the_check_plays_of_control_plane_stop_every_host_on_one_failure():
    plays = yaml.safe_load((REPO / "playbooks" / "control_plane.yml").read_text())
    first_install = next(i for i, play in enumerate(plays) if INSTALL_ROLES & _play_roles(play))
    checks = plays[:first_install]
    # The checks the issue names must be among them (so a reordering that moves one after the install fails here).
    check_roles = set(r for play in checks for r in _play_roles(play))
    assert {"pairserve.llm.preflight", "pairserve.llm.checkpoint"} <= check_roles, check_roles
    assert any("pairserve.llm.gpu_pairs" in task for play in checks for task in play["tasks"])
    lax = [play["name"] for play in checks if play.get("any_errors_fatal") is not True]
    assert not lax, "these plays run before %r without any_errors_fatal: true: %s" % (plays[first_install]["name"], lax)


# -- one GPU in at most one replica across hosts ---------------------------------------------------------------------

from ansible_collections.pairserve.llm.plugins.module_utils.inventory_check import gpu_conflicts, ready_worker_gpus  # noqa: E402
from support.ansible_runner import run_playbook  # noqa: E402


def _pairs(*groups):
    return [{"index": i, "uuids": list(g)} for i, g in enumerate(groups)]


def test_distinct_gpus_have_no_conflict():
    assert gpu_conflicts({"node-a": _pairs(["GPU-a1", "GPU-a2"]), "node-b": _pairs(["GPU-b1", "GPU-b2"]),
                          "node-c": None}) == []
    # A worker's GPUs that GPUStack declares without a UUID never match.
    assert gpu_conflicts({"node-b": _pairs(["GPU-b1", "GPU-b2"])}, {"node-a": ["", ""]}) == []


def test_a_gpu_in_two_hosts_pairs_names_both_hosts_and_pairs():
    found = gpu_conflicts({"node-b": _pairs(["GPU-x1", "GPU-x2"]),
                           "node-a": _pairs(["GPU-a1", "GPU-a2"], ["GPU-x1", "GPU-x2"])})
    assert len(found) == 1, found
    assert (found[0]["host"], found[0]["variable"]) == ("node-a", "pairserve_gpu")
    assert "GPU-x1, GPU-x2 are in its pair 1 and node-b's pair 0" in found[0]["problem"], found[0]["problem"]
    assert "ansible_host" in found[0]["problem"] and "pairserve_gpu_exclude" in found[0]["problem"]
    assert found[0]["text"].startswith("node-a: pairserve_gpu: GPU-x1, GPU-x2 are in")


def test_three_holders_give_one_problem_per_two_of_them():
    same = _pairs(["GPU-s1", "GPU-s2"])
    found = gpu_conflicts({"node-a": same, "node-b": same, "node-c": same})
    assert sorted((p["host"], p["problem"].split("'s")[0].rsplit(" ", 1)[1]) for p in found) == [
        ("node-a", "node-b"), ("node-a", "node-c"), ("node-b", "node-c")]


def test_a_gpu_of_another_gpustack_worker_is_named_with_that_worker():
    found = gpu_conflicts({"node-b": _pairs(["GPU-a1", "GPU-b2"])},
                          {"node-a": ["GPU-a1", "GPU-a2"], "node-c": ["GPU-a1"]})
    assert [(p["host"], "GPUStack worker node-a" in p["problem"], "GPUStack worker node-c" in p["problem"])
            for p in found] == [("node-b", True, False), ("node-b", False, True)], found
    assert "GPU-a1 is in its pair 0 and a GPU of GPUStack worker node-a" in found[0]["problem"]
    assert "worker record of this machine under another name" in found[0]["problem"]


TASKS = REPO / "roles" / "preflight" / "tasks" / "gpu_conflicts.yml"


def _conflict_run(tmp_path, node_vars, extra=None):
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": node_vars}},
                         "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "GPU conflicts", "hosts": "gpu_nodes", "gather_facts": False,
        "tasks": [{"name": "Check", "ansible.builtin.include_tasks": str(TASKS), "vars": extra or {}},
                  {"name": "Reached", "ansible.builtin.debug": {"msg": "after the check"}}]}]))
    return run_playbook(tmp_path / "play.yml", inventory=tmp_path / "hosts.yml", timeout=300)


def test_the_play_check_stops_on_a_gpu_of_two_hosts_and_passes_distinct_ones(tmp_path):
    same = {"pairserve_gpu": {"pairs": _pairs(["GPU-s1", "GPU-s2"])}}
    res = _conflict_run(tmp_path, {"node-a": same, "node-b": same,
                                   "node-c": {"pairserve_gpu": {"pairs": _pairs(["GPU-c1", "GPU-c2"])}}})
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert len(failed) == 1 and "1 GPU conflict(s)" in failed[0]["msg"], res.results
    assert "node-a: pairserve_gpu: GPU-s1, GPU-s2 are in its pair 0 and node-b's pair 0" in failed[0]["msg"]
    assert not [r for r in res.results if r["_task"] == "Reached"]

    res = _conflict_run(tmp_path, {"node-a": {"pairserve_gpu": {"pairs": _pairs(["GPU-a1", "GPU-a2"])}},
                                   "node-b": {"pairserve_gpu": {"pairs": _pairs(["GPU-b1", "GPU-b2"])}}})
    assert res.rc == 0, res.stdout[-3000:]
    assert len([r for r in res.results if r["_task"] == "Reached"]) == 2


def test_the_rebuild_check_counts_only_the_other_ready_workers_gpus(tmp_path):
    view = {"workers": [{"name": "node-a", "state": "ready"}, {"name": "node-b", "state": "ready"},
                        {"name": "node-c", "state": "unreachable"}],
            "gpus": [{"worker_name": "node-a", "uuid": "GPU-a1"}, {"worker_name": "node-b", "uuid": "GPU-b1"},
                     {"worker_name": "node-c", "uuid": "GPU-b2"}]}
    node_b = {"node-b": {"pairserve_gpu": {"pairs": _pairs(["GPU-b1", "GPU-b2"])}}}
    # Its own worker's GPUs and an unreachable worker's stale report do not count.
    res = _conflict_run(tmp_path, node_b, {"pairserve_gpu_conflicts_gpustack": view,
                                           "pairserve_gpu_conflicts_worker": "node-b"})
    assert res.rc == 0, res.stdout[-3000:]
    view["gpus"][0]["uuid"] = "GPU-b2"  # a ready node-a reports node-b's card
    res = _conflict_run(tmp_path, node_b, {"pairserve_gpu_conflicts_gpustack": view,
                                           "pairserve_gpu_conflicts_worker": "node-b"})
    assert res.rc != 0
    msg = [r for r in res.results if r["_status"] == "failed"][0]["msg"]
    assert "node-b: pairserve_gpu: GPU-b2 is in its pair 0 and a GPU of GPUStack worker node-a" in msg, msg


def test_only_the_other_ready_workers_gpus_with_a_uuid_count():
    view = {"workers": [{"name": "node-a", "state": "ready"}, {"name": "node-b", "state": "ready"},
                        {"name": "node-c", "state": "unreachable"}],
            "gpus": [{"worker_name": "node-a", "uuid": "GPU-a1"}, {"worker_name": "node-a", "uuid": ""},
                     {"worker_name": "node-a", "uuid": "GPU-a2"}, {"worker_name": "node-b", "uuid": "GPU-b1"},
                     {"worker_name": "node-c", "uuid": "GPU-c1"}]}
    assert ready_worker_gpus(view, "node-b") == {"node-a": ["GPU-a1", "GPU-a2"]}
    assert ready_worker_gpus(view) == {"node-a": ["GPU-a1", "GPU-a2"], "node-b": ["GPU-b1"]}
    assert ready_worker_gpus({}) == {} and ready_worker_gpus(None, "node-b") == {}


def _index(tasks, predicate, what, first=False):
    found = [i for i, task in enumerate(tasks) if predicate(task)]
    assert len(found) == 1 or (first and found), "%s: %d matching task(s)" % (what, len(found))
    return found[0]


def _includes(path):
    """A task that includes the task file ``path`` of the same role, or ``role:entry`` of another role."""
    if ":" in path:
        role, entry = path.split(":")
        return lambda task: any((task.get(k) or {}).get("name") == "pairserve.llm." + role
                                and task[k].get("tasks_from") == entry
                                for k in ("ansible.builtin.import_role", "ansible.builtin.include_role"))
    return lambda task: any(task.get(k) == path for k in ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks"))


def test_the_gpu_conflict_check_runs_after_detection_and_before_any_change():
    plays = yaml.safe_load((REPO / "playbooks" / "control_plane.yml").read_text())
    play = next(p for p in plays if any("pairserve.llm.gpu_pairs" in t for t in p["tasks"]))
    tasks = play["tasks"]
    check = _index(tasks, _includes("preflight:gpu_conflicts"), "control_plane.yml")
    assert _index(tasks, lambda t: "pairserve.llm.gpu_pairs" in t, "gpu_pairs") < check
    assert play.get("any_errors_fatal") is True  # and it is before the install (the test above)

    rebuild = yaml.safe_load((REPO / "roles" / "rebuild" / "tasks" / "main.yml").read_text())
    check = _index(rebuild, _includes("preflight:gpu_conflicts"), "the rebuild role")
    assert _index(rebuild, _includes("maintenance:detect"), "detect") < check
    assert _index(rebuild, _includes("maintenance:view"), "view", first=True) < check
    assert rebuild[check]["vars"]["pairserve_gpu_conflicts_gpustack"] == "{{ _pairserve_maintenance_info }}"
    first_change = _index(rebuild, lambda t: "block" in t, "the rebuild block")
    assert check < _index(rebuild, lambda t: t["name"].startswith("Render and check the replica"), "render") \
        < first_change


def test_a_weights_file_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "group_vars" / "all.yml").mkdir(parents=True)
    found = problems({"node-a": dict(GOOD_VIEW, pairserve_bench_weights_file="group_vars/all.yml",
                                     inventory_dir=str(tmp_path)), "node-b": dict(GOOD_VIEW)}, GROUPS, ["2.2.3"])
    assert [p["text"] for p in found if p["variable"] == "pairserve_bench_weights_file"] == [
        "node-a: pairserve_bench_weights_file: %s is a directory: name a .yml file in it" % (tmp_path / "group_vars" / "all.yml")]


def test_a_renamed_host_fails_validation_on_the_verify_routes():
    views = {h: dict(copy.deepcopy(GOOD_VIEW), pairserve_route_weights={"gpu1": 58, "gpu2": 42},
                     pairserve_verify_routes=[{"name": "qwen", "models": ["qwen-node-a", "qwen-node-b"]}])
             for h in ("gpu1", "gpu2")}
    found = problems(views, {"gpustack_server": ["gpu1"], "gpu_nodes": ["gpu1", "gpu2"]}, ["2.2.3"])
    texts = [p["text"] for p in found]
    assert [p["variable"] for p in found] == ["pairserve_verify_routes"] * 4, texts
    assert "gpu1: pairserve_verify_routes: route qwen: qwen-node-a is not a replica of a GPU node" in texts[0]
    assert any("qwen-gpu2 (the replica of gpu2) is in no route verify checks: add it to the models of qwen" in t
               for t in texts), texts
    assert {p["fix"] for p in found} == {"group_vars/all/serving.yml"}


def test_the_report_merges_a_problem_of_several_hosts_and_names_where_to_fix_it():
    views = {h: dict(copy.deepcopy(GOOD_VIEW), pairserve_checkpoint_revision="main") for h in ("node-a", "node-b")}
    views["node-a"]["pairserve_gpustack_db_password_set"] = False
    found = problems(views, GROUPS, ["2.2.3"])
    assert report(found) == [
        "node-a, node-b: pairserve_checkpoint_revision: 'main' is not a 40-hex commit sha (GPUStack has no revision "
        "field: a branch name would drift) [fix in: group_vars/all/pins.yml]",
        "node-a: pairserve_gpustack_db_password: is not set: vault it as vault_pairserve_gpustack_db_password "
        "(ansible-vault encrypt_string --name vault_pairserve_gpustack_db_password ...) "
        "[fix in: group_vars/all/vault.yml (docs/first-install.md, step 3)]",
    ]


def test_a_vaulted_secret_without_the_vault_password_is_one_line_not_a_missing_secret():
    views = {h: copy.deepcopy(GOOD_VIEW) for h in ("node-a", "node-b")}
    for view in views.values():
        view.update(pairserve_gpustack_admin_password_set=False, pairserve_gpustack_admin_password_locked=True)
    lines = report(problems(views, GROUPS, ["2.2.3"]))
    assert lines == ["node-a, node-b: pairserve_gpustack_admin_password: is vaulted, and this run has no vault "
                     "password to read it: run again with --ask-vault-pass (or --vault-password-file FILE) "
                     "[fix in: group_vars/all/vault.yml (docs/first-install.md, step 3)]"], lines
