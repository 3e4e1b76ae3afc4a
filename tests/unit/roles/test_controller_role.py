# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller role (roles/controller): what it renders for a few inventories, checked by the real script.

The role runs for real through ansible-playbook against localhost in check mode (argument validation,
preflight, the install tasks, the guarded service tasks and handler); the rendered configuration and unit come
back in the template tasks' diffs. Nothing is installed and no service is started on this machine: the
configuration and key paths point into the test's tmp directory and check mode writes nothing there either.
The removal entry point runs for real on tmp paths. Also: the script's --check-config and --api-key-file.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.pairserve.llm.plugins.plugin_utils import controller_wheel
from support.ansible_runner import run_playbook
from pairserve_controller import cli, config, service
from pairserve_controller import policy as pp
from support.controller_ini import REPLICA_SECTIONS

UNIT = "/etc/systemd/system/pairserve-controller.service"
KEY = "sk-pairserve-test0controller0key0never0shown"

needs_systemctl = pytest.mark.skipif(
    shutil.which("systemctl") is None,
    reason="the role's preflight reads `systemctl --version`; this machine has no systemd tools")


def _play(tmp_path, entry="main", check=True, **host_vars):
    """Run the role (or its absent entry point) on localhost with an inventory holding host_vars."""
    base = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        # The management key gpustack_server leaves as a fact; here an inventory value stands in for it.
        "pairserve_gpustack_management_key": KEY,
        "pairserve_controller_home": str(tmp_path / "home"),
        # The route's weights by host, which the controller's static weights come from.
        "pairserve_route_weights": {"node-a": 58, "node-b": 42},
        "pairserve_controller_config_file": str(tmp_path / "etc" / "controller.ini"),
        "pairserve_controller_key_file": str(tmp_path / "etc" / "controller.key"),
    }
    base.update(host_vars)
    inventory = tmp_path / "inventory.yml"
    gpu_nodes = dict((host, {}) for host in base.pop("gpu_nodes", ("node-a", "node-b")))
    # localhost is the GPUStack server the controller runs on (the role reads the server's port from there).
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": base},
                                                 "children": {"gpu_nodes": {"hosts": gpu_nodes},
                                                              "gpustack_server": {"hosts": {"localhost": {}}}}}}))
    task = {"name": "The controller role", "ansible.builtin.include_role": {"name": "pairserve.llm.controller"}}
    if entry != "main":
        task["ansible.builtin.include_role"]["tasks_from"] = entry + ".yml"
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Controller role test", "hosts": "localhost", "gather_facts": False,
                                         "tasks": [task]}]))
    # the controller's wheel is built into the test's directory, not the user's cache
    return run_playbook(playbook, inventory=inventory, check=check, diff=True, timeout=300,
                        env={"XDG_CACHE_HOME": str(tmp_path / "cache")})


def _by_task(res, name):
    found = [r for r in res.results if r["_task"] == name]
    assert found, "no task %r ran; tasks: %s\n%s" % (name, [r["_task"] for r in res.results], res.stdout[-3000:])
    return found[-1]


def _rendered(res, task):
    diff = _by_task(res, task)["diff"]
    diff = diff[0] if isinstance(diff, list) else diff
    return diff["after"]


@pytest.fixture(name="installed", scope="module")
def installed_fixture(tmp_path_factory):
    """The controller's wheel installed alone (pip --no-deps) into a directory of its own: what the role's
    validate step and unit run on a node, with nothing of this checkout on the path."""
    where = tmp_path_factory.mktemp("controller-wheel")
    wheel = controller_wheel.write(where / "wheels")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(where / "site"), wheel["path"]], check=True, timeout=120)
    return where / "site"


def _check_config(path, installed):
    """The role's validate command: the installed wheel's --check-config."""
    env = dict((k, v) for k, v in os.environ.items() if k != "PYTHONPATH")
    env["PYTHONPATH"] = str(installed)
    return subprocess.run([sys.executable, "-m", "pairserve_controller", "--check-config", str(path)],
                          capture_output=True, text=True, check=False, timeout=60, cwd=str(installed), env=env)


def _verify_unit(path):
    """systemd-analyze verify's complaints about this unit file (unknown keys, bad values)."""
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True,
                          check=False, timeout=60)
    return [line for line in (proc.stdout + proc.stderr).splitlines() if str(path) in line or path.name in line]


INVENTORIES = {
    # Only the switch: weights mode, the seed's replicas and speeds, the server's own API port.
    "defaults": ({"pairserve_controller_enabled": True}, {
        "url": "http://127.0.0.1:30080", "route": "qwen", "mode": "queue_aware", "sleep": False,
        "names": ("qwen-node-a", "qwen-node-b"), "static": {"qwen-node-a": 58, "qwen-node-b": 42},
        "speeds": {"qwen-node-a": (2767, 275), "qwen-node-b": (1823, 220)}, "idle_s": 1800.0,
        "dry_run": False, "log_level": "INFO"}),
    # Both jobs, a renamed route and API port from the other roles' variables, a dry run.
    "both": ({"pairserve_controller_enabled": True, "pairserve_controller_mode": "both",
              "pairserve_route_name": "qwen-pool", "pairserve_gpustack_api_port": 31080,
              "pairserve_controller_idle_minutes": 12, "pairserve_controller_wake_waiting": 2,
              "pairserve_controller_dry_run": True, "pairserve_controller_log_level": "DEBUG"}, {
        "url": "http://127.0.0.1:31080", "route": "qwen-pool", "mode": "queue_aware", "sleep": True,
        "sleeper": "qwen-node-b", "idle_s": 720.0, "wake_waiting": 2, "names": ("qwen-node-a", "qwen-node-b"),
        "dry_run": True, "log_level": "DEBUG"}),
    # Sleep only (static weights), a third pair, measured speeds, a metrics URL and a served-model filter.
    # The third replica's host named explicitly (its model name does not end in it); the weights are the route's.
    "sleep-three": ({"pairserve_controller_enabled": True, "pairserve_controller_mode": "sleep",
                     "pairserve_controller_sleep_replica": "qwen-node-c",
                     "gpu_nodes": ("node-a", "node-b", "gpu3"),
                     "pairserve_route_weights": {"node-a": 50, "node-b": 30, "gpu3": 20},
                     "pairserve_controller_replicas": [
                         {"name": "qwen-node-a", "prefill_tps": 2700.5, "decode_tps": 244},
                         {"name": "qwen-node-b", "prefill_tps": 1800, "decode_tps": 177},
                         {"name": "qwen-node-c", "prefill_tps": 1500, "decode_tps": 150, "host": "gpu3",
                          "metrics_url": "http://10.0.0.3:40000/metrics", "served_model_name": "qwen-node-c"}]}, {
        "url": "http://127.0.0.1:30080", "route": "qwen", "mode": "static", "sleep": True, "sleeper": "qwen-node-c",
        "names": ("qwen-node-a", "qwen-node-b", "qwen-node-c"),
        "static": {"qwen-node-a": 50, "qwen-node-b": 30, "qwen-node-c": 20},
        "speeds": {"qwen-node-a": (2700.5, 244), "qwen-node-c": (1500, 150)},
        "dry_run": False, "log_level": "INFO"}),
}


@needs_systemctl
@pytest.mark.parametrize("case", sorted(INVENTORIES))
def test_role_renders_a_config_the_script_accepts_and_a_hardened_unit(tmp_path, case, installed):
    host_vars, expect = INVENTORIES[case]
    res = _play(tmp_path, **host_vars)
    assert res.rc == 0, res.stdout[-4000:]
    ini_text = _rendered(res, "Write the configuration")
    unit_text = _rendered(res, "Install the systemd unit")

    # The real script's check (the role's validate step) and the parser the service uses.
    ini = tmp_path / "rendered.ini"
    ini.write_text(ini_text)
    proc = _check_config(ini, installed)
    assert proc.returncode == 0, proc.stderr
    assert "ok: route %s, mode %s" % (expect["route"], expect["mode"]) in proc.stdout
    cfg = config.read_config(str(ini))
    policy = config.policy_from_config(cfg)
    assert cfg["gpustack"]["url"] == expect["url"] and cfg["gpustack"]["route"] == expect["route"]
    assert cfg["gpustack"]["api_key_file"] == str(tmp_path / "etc" / "controller.key")
    assert policy.mode == expect["mode"] and policy.sleep_enabled is expect["sleep"]
    assert policy.names == expect["names"]
    for name, (prefill, decode) in expect.get("speeds", {}).items():
        assert policy.speeds[name] == pp.Speed(prefill, decode)
    if "static" in expect:
        assert policy.static == expect["static"]
    if expect["sleep"]:
        assert policy.sleeper == expect["sleeper"]
    for field in ("idle_s", "wake_waiting"):
        if field in expect:
            assert getattr(policy, field) == expect[field]
    if case == "sleep-three":
        assert cfg["replicas"]["qwen-node-c"]["served_model_name"] == "qwen-node-c"
        assert cfg["replicas"]["qwen-node-c"]["metrics_url"] == "http://10.0.0.3:40000/metrics"
        assert "served_model_name" not in cfg["replicas"]["qwen-node-a"]

    # The key is in no rendered file, no diff, no task output.
    assert KEY not in ini_text and KEY not in unit_text
    assert KEY not in res.stdout and KEY not in json.dumps(res.results)

    # The unit: its own system user reading the configuration and key files, a read-only system.
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read_string(unit_text)
    svc = unit["Service"]
    exec_start = svc["ExecStart"]
    assert exec_start.startswith("%s " % (tmp_path / "home" / "venv" / "bin" / "pairserve-controller"))
    assert "--config %s --api-key-file %s" % (tmp_path / "etc" / "controller.ini", tmp_path / "etc" / "controller.key") \
        in exec_start
    assert ("--dry-run" in exec_start) is expect["dry_run"]
    assert "--log-level %s" % expect["log_level"] in exec_start
    assert "DynamicUser" not in svc and "LoadCredential" not in unit_text
    for key, value in (("User", "pairserve-controller"), ("Group", "pairserve-controller"),
                       ("NoNewPrivileges", "true"), ("ProtectSystem", "strict"),
                       ("StateDirectory", "pairserve-controller"), ("RestartPreventExitStatus", "2")):
        assert svc[key] == value, key
    assert cfg["controller"]["wake_log"].startswith("/var/lib/%s/" % svc["StateDirectory"]), \
        "the wake log must be in the one writable directory"
    if shutil.which("systemd-analyze"):
        path = tmp_path / "pairserve-controller.service"
        path.write_text(unit_text)
        # Check mode makes no venv: systemd's "is not executable" for its command is the only complaint allowed.
        python = str(tmp_path / "home" / "venv" / "bin" / "pairserve-controller")
        assert [line for line in _verify_unit(path) if "Command %s is not executable" % python not in line] == []

    # Check mode: nothing written, systemd not asked about a unit that does not exist, no restart.
    assert not (tmp_path / "home").exists() and not (tmp_path / "etc").exists()
    if not os.path.exists(UNIT):
        for task in ("Enable the pairserve controller", "Make sure the pairserve controller runs",
                     "Restart the pairserve controller"):
            assert _by_task(res, task)["_status"] == "skipped", task
    assert _by_task(res, "Write the GPUStack API key file (never shown)")["changed"]


@pytest.mark.parametrize("host_vars, words", [
    ({"pairserve_controller_mode": "sleepy"}, ["pairserve_controller_mode", "weights, sleep, both"]),
    ({"pairserve_controller_replicas": [{"name": "qwen-node-a", "prefill_tps": 2767}]},
     ["decode_tps"]),
    ({"pairserve_controller_log_level": "CHATTY"}, ["pairserve_controller_log_level"]),
])
def test_bad_values_fail_argument_validation_before_any_task(tmp_path, host_vars, words):
    res = _play(tmp_path, pairserve_controller_enabled=True, **host_vars)
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert len(failed) == 1 and "argument" in failed[0]["_task"].lower(), [r["_task"] for r in res.results]
    for word in words:
        assert word in failed[0]["msg"], failed[0]["msg"]
    assert [r for r in res.results if r.get("changed")] == []


@needs_systemctl
@pytest.mark.parametrize("host_vars, words", [
    ({"pairserve_controller_mode": "both", "pairserve_controller_sleep_replica": "qwen-node-x"},
     ["pairserve_controller_sleep_replica: 'qwen-node-x' is not one of pairserve_controller_replicas"]),
    ({"pairserve_controller_mode": "sleep",
      "pairserve_controller_replicas": [{"name": "qwen-node-a", "prefill_tps": 2767, "decode_tps": 275}]},
     ["at least", "two replicas"]),
    ({"pairserve_controller_replicas": [{"name": "qwen-node-a", "prefill_tps": 0, "decode_tps": 275},
                                        {"name": "qwen-node-b", "prefill_tps": 1823, "decode_tps": 220}]},
     ["qwen-node-a: prefill_tps 0 is not a speed above 0"]),
    ({"pairserve_controller_replicas": [{"name": "qwen-gpu-1", "prefill_tps": 2767, "decode_tps": 275},
                                        {"name": "qwen-node-b", "prefill_tps": 1823, "decode_tps": 220}]},
     ["replica qwen-gpu-1: no inventory host is named by it"]),
    ({"pairserve_controller_min_weight": 60, "pairserve_controller_max_weight": 40}, ["min_weight (60)"]),
])
def test_inconsistent_inventories_fail_in_preflight_naming_the_variable(tmp_path, host_vars, words):
    res = _play(tmp_path, pairserve_controller_enabled=True, **host_vars)
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert [r["_task"] for r in failed] == ["Check the replicas, the sleep replica, the bounds and the timings"]
    text = " ".join(failed[0]["msg"].split())
    for word in words:
        assert word in text, text
    assert [r for r in res.results if r.get("changed")] == []


@needs_systemctl
def test_without_the_management_key_the_role_says_where_it_comes_from(tmp_path):
    res = _play(tmp_path, pairserve_controller_enabled=True, pairserve_gpustack_management_key="")
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert [r["_task"] for r in failed] == ["Check the GPUStack URL and key"]
    # no_log on that task: the message is hidden, the playbook's output names the task.
    assert "Check the GPUStack URL and key" in res.stdout


@pytest.mark.skipif(os.path.exists(UNIT), reason="a real pairserve-controller unit is installed on this machine")
def test_turning_it_off_removes_what_it_installed_and_then_changes_nothing(tmp_path):
    for path in ("home/lib/pairserve-controller", "home/lib/pairserve_controller/cli.py", "home/venv/bin/python",
                 "home/wheels/pairserve_controller-0.1.0+g000000000000-py3-none-any.whl",
                 "etc/controller.ini", "etc/controller.key"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("installed by an earlier run\n")
    first = _play(tmp_path, entry="absent", check=False, pairserve_controller_enabled=False)
    assert first.rc == 0, first.stdout[-3000:]
    assert not (tmp_path / "home").exists()  # venv, wheel (and an earlier version's package), then the directory
    assert not (tmp_path / "etc" / "controller.ini").exists() and not (tmp_path / "etc" / "controller.key").exists()
    assert _by_task(first, "Stop and disable the pairserve controller")["_status"] == "skipped"
    second = _play(tmp_path, entry="absent", check=False, pairserve_controller_enabled=False)
    assert second.rc == 0 and [r["_task"] for r in second.results if r.get("changed")] == []


def test_main_entry_point_with_the_switch_off_installs_nothing(tmp_path):
    res = _play(tmp_path, pairserve_controller_enabled=False)
    assert res.rc == 0, res.stdout[-3000:]
    ran = {r["_task"] for r in res.results if r["_status"] != "skipped"}
    assert "Install the controller's wheel into its venv" not in ran and "Write the configuration" not in ran
    assert [r for r in res.results if r.get("changed")] == []


# -- the script's configuration check and key option --------------------------------------------------------

KEY_LINE = "api_key_file = /etc/pairserve/controller.key"
GOOD = """[gpustack]
url = http://127.0.0.1:30080
api_key_file = /etc/pairserve/controller.key
route = qwen

[controller]
mode = queue_aware

[sleep]
enabled = true
replica = qwen-node-b

""" + REPLICA_SECTIONS


@pytest.mark.parametrize("old, new, match", [
    ("route = qwen\n", "route = qwen\nidle_minute = 5\n", r"\[gpustack\] has unknown key\(s\) idle_minute"),
    ("mode = queue_aware\n", "mode = weights\n", "mode 'weights': use queue_aware or static"),
    ("url = http://127.0.0.1:30080\n", "url = 127.0.0.1:30080\n", "not an http"),
    ("api_key_file = /etc/pairserve/controller.key\n", "", "needs api_key or api_key_file"),
    ("replica = qwen-node-b\n", "replica = qwen-node-z\n", "sleep replica 'qwen-node-z' is not one"),
    ("mode = queue_aware\n", "mode = queue_aware\nmin_weight = 70\nmax_weight = 30\n", "min_weight"),
    ("mode = queue_aware\n", "mode = queue_aware\ninterval = 0\n", "interval must be above 0"),
    ("mode = queue_aware\n", "mode = queue_aware\nwake_log = wakes.jsonl\n", "absolute path"),
    ("static_weight = 58\n", "static_weight = 0\n", None),
    ("[gpustack]\n", "", "no section headers|File contains no section headers"),
])
def test_check_config_refuses_what_the_service_would_misread(tmp_path, old, new, match, installed):
    assert old in GOOD
    path = tmp_path / "controller.ini"
    path.write_text(GOOD.replace(old, new, 1))
    proc = _check_config(path, installed)
    if match is None:  # one static weight of 0 is fine as long as another is above 0
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stdout
    assert str(path) in proc.stderr
    assert re.search(match, proc.stderr), proc.stderr


def test_check_config_accepts_the_documented_example_and_says_what_it_will_do(tmp_path, installed):
    path = tmp_path / "controller.ini"
    path.write_text(GOOD)
    proc = _check_config(path, installed)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("%s: ok: route qwen, mode queue_aware, replicas qwen-node-a (static 58), "
                                   "qwen-node-b (static 42), sleep qwen-node-b after 30 min idle" % path)


def test_api_key_file_option_replaces_the_configured_key(tmp_path, monkeypatch):
    path = tmp_path / "controller.ini"
    path.write_text(GOOD.replace(KEY_LINE, "api_key = sk-wrong"))
    key = tmp_path / "credential"
    key.write_text("sk-from-the-credential\n")
    seen = []

    class Recording(service.Controller):
        def __init__(self, cfg, **kwargs):
            super().__init__(cfg, **kwargs)
            seen.append(self.api.client.api_key)
            raise ValueError("stop here")

    monkeypatch.setattr(cli, "Controller", Recording)
    assert cli.main(["--config", str(path), "--api-key-file", str(key), "--once"]) == 2
    assert cli.main(["--config", str(path), "--once"]) == 2
    assert seen == ["sk-from-the-credential", "sk-wrong"]
    assert cli.main(["--config", str(path), "--api-key-file", str(tmp_path / "missing"), "--once"]) == 2
    assert len(seen) == 2, "a missing key file stops the start (exit 2) before any request"


# -- a site.yml run while the controller runs --------------------------------------------------------------

class FakeGpuStack:
    """The GpuStack calls Controller makes, on plain dicts (the HTTP layer is tested in test_controller.py)."""

    def __init__(self):
        self.models = {"qwen-node-a": {"id": 7, "name": "qwen-node-a", "replicas": 1},
                       "qwen-node-b": {"id": 8, "name": "qwen-node-b", "replicas": 1}}
        self.running = {7: True, 8: True}
        self.targets = [{"id": 1, "route_id": 3, "model_id": 7, "weight": 58},
                        {"id": 2, "route_id": 3, "model_id": 8, "weight": 42}]
        self.calls = []

    def models_by_name(self):
        return json.loads(json.dumps(self.models))

    def instances(self, model_id):
        return [{"model_id": model_id, "state": "running", "worker_ip": "127.0.0.1", "port": model_id}] \
            if self.running[model_id] else []

    def route(self, name):
        return {"id": 3, "name": name}

    def route_targets(self, route_id):
        return [dict(t) for t in self.targets if t["route_id"] == route_id]

    def set_route_weights(self, route, targets, weights, names_by_id):  # pylint: disable=unused-argument
        for target in self.targets:
            target["weight"] = weights[names_by_id[target["model_id"]]]
        self.calls.append(("weights", {t["model_id"]: t["weight"] for t in self.targets}))

    def set_replicas(self, model_id, replicas):
        self.models[{7: "qwen-node-a", 8: "qwen-node-b"}[model_id]]["replicas"] = replicas
        self.running[model_id] = False
        self.calls.append(("replicas", model_id, replicas))

    def weights(self):
        return {t["model_id"]: t["weight"] for t in self.targets}


def _idle_metrics(url, model_name):  # pylint: disable=unused-argument
    """What an idle replica's /metrics reads as (the parsing is tested in test_controller.py)."""
    return pp.MetricsSnapshot(waiting=0, running=0)


def test_a_site_run_that_wakes_the_sleeping_replica_is_noticed_and_its_weight_held_at_zero(tmp_path):
    path = tmp_path / "controller.ini"
    path.write_text(GOOD.replace("mode = queue_aware", "mode = static").replace(KEY_LINE, "api_key = sk-x")
                    .replace("replica = qwen-node-b\n", "replica = qwen-node-b\nidle_minutes = 1\ndrain_grace = 0\n"))
    api, clock = FakeGpuStack(), [0.0]
    ctrl = service.Controller(config.read_config(str(path)), api=api, clock=lambda: clock[0], read_metrics=_idle_metrics)
    for now in (0.0, 61.0, 62.0):  # idle for a minute: weight 0, then scaled to zero
        clock[0] = now
        ctrl.tick()
    assert ctrl.state.phase == pp.SLEEPING
    assert api.calls == [("weights", {7: 100, 8: 0}), ("replicas", 8, 0)]

    # site.yml runs: the replica role registers node B with replicas 1, the route role puts 58/42 back.
    api.models["qwen-node-b"]["replicas"] = 1
    for target in api.targets:
        target["weight"] = {7: 58, 8: 42}[target["model_id"]]
    clock[0] = 63.0
    ctrl.tick()
    assert api.weights() == {7: 100, 8: 0}, "no weight for a replica without a running instance (503s)"
    assert ctrl.state.phase == pp.WAKING

    # Its instance comes up: the cold start is recorded from when it was noticed and the weight restored.
    api.running[8] = True
    clock[0] = 400.0
    actions = ctrl.tick()
    assert [a.kind for a in actions] == ["record_wake", "set_weights"]
    assert actions[0].seconds == pytest.approx(337.0)
    assert api.weights() == {7: 58, 8: 42} and ctrl.state.phase == pp.WARM


def test_a_dry_run_keeps_its_own_picture_and_does_not_repeat_itself(tmp_path):
    path = tmp_path / "controller.ini"
    path.write_text(GOOD.replace("enabled = true", "enabled = false").replace("mode = queue_aware", "mode = static")
                    .replace(KEY_LINE, "api_key = sk-x")
                    .replace("static_weight = 58", "static_weight = 70").replace("static_weight = 42",
                                                                                 "static_weight = 30"))
    api, clock = FakeGpuStack(), [0.0]
    ctrl = service.Controller(config.read_config(str(path)), api=api, dry_run=True, clock=lambda: clock[0],
                              read_metrics=_idle_metrics)
    assert [a.kind for a in ctrl.tick()] == ["set_weights"]
    clock[0] = 100.0
    assert ctrl.tick() == [], "the route still has 58/42, but a dry run must not read that as an outside change"
    assert api.calls == [] and api.weights() == {7: 58, 8: 42}
