"""What the preflight role reads from the nodes before anything is installed: a port the collection will bind that
another program holds is refused naming the process (the collection's own holder, a re-run, passes), two inventory
names for one machine are refused by its machine id, and a node that still runs GPUStack's server while the server
group names another host is refused naming both. Real sockets, processes and facts of this machine, read through
/proc by pairserve.llm.listening_ports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.pairserve.llm.plugins.module_utils import node_ports
from support.ansible_runner import REPO, run_module, run_playbook
from support.ports import free_port

HOLD = "import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n" \
       "print(s.getsockname()[1], flush=True)\ntime.sleep(600)\n"


@pytest.fixture()
def holder(tmp_path):
    """Start a process named NAME (its executable's file name) that listens on a free port: (port, pid)."""
    started = []

    def start(name):
        exe = tmp_path / name
        if not exe.exists():
            exe.symlink_to(os.path.realpath(sys.executable))
        proc = subprocess.Popen([str(exe), "-c", HOLD], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        return int(proc.stdout.readline()), proc.pid
    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_the_module_names_the_process_holding_a_port(holder):
    port, pid = holder("squatter")
    result = run_module("listening_ports", {"ports": [port]}, check=True).result
    assert result["changed"] is False
    assert result["sockets"] == [{"port": port, "address": "127.0.0.1", "pid": pid, "process": "squatter"}]


def test_parse_proc_net_tcp():
    text = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
            "   0: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1\n"
            "   1: 0100007F:D2F0 0100007F:1388 01 00000000:00000000 00:00000000 00000000     0        0 4343 1\n")
    assert node_ports.parse_proc_net_tcp(text) == [{"port": 5000, "address": "127.0.0.1", "inode": 4242}]
    six = ("  sl  local_address                         remote_address                        st\n"
           "   0: 00000000000000000000000000000000:7596 00000000000000000000000000000000:0000 0A 0:0 0:0 0 0 0 77 1\n")
    assert node_ports.parse_proc_net_tcp(six, "ipv6") == [{"port": 30102, "address": "::", "inode": 77}]


def test_the_rule():
    sockets = [{"port": 30080, "address": "0.0.0.0", "pid": 7, "process": "gpustack"},
               {"port": 10150, "address": "0.0.0.0", "pid": 9, "process": "jupyter-lab"},
               {"port": 10151, "address": "::", "pid": None, "process": None}]
    wanted = [{"port": 30080, "variable": "pairserve_gpustack_api_port", "owners": ["gpustack"]},
              {"port": "10150", "variable": "pairserve_gpustack_worker_port", "owners": ["gpustack"],
               "what": "GPUStack's worker"},
              {"port": 10151, "variable": "pairserve_gpustack_worker_metrics_port", "owners": ["gpustack"]}]
    found = node_ports.held_ports_problems(sockets, wanted, "node-b")
    assert [(p["host"], p["variable"]) for p in found] == [
        ("node-b", "pairserve_gpustack_worker_port"), ("node-b", "pairserve_gpustack_worker_metrics_port")]
    assert found[0]["problem"] == ("port 10150 is already held by jupyter-lab (pid 9) on 0.0.0.0: GPUStack's worker "
                                   "could not bind it. Stop that program or give pairserve_gpustack_worker_port "
                                   "another port")
    assert "another PID namespace" in found[1]["problem"]


def _preflight_ports(tmp_path, port):
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"node-x": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "pairserve_gpustack_worker_port": port, "pairserve_gpustack_worker_metrics_port": free_port()}}}}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "ports", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
            {"name": "Check", "ansible.builtin.include_tasks": str(REPO / "roles" / "preflight" / "tasks" / "ports.yml"),
             "vars": {"role_path": str(REPO / "roles" / "preflight")}},
            {"name": "Reached", "ansible.builtin.debug": {"msg": "after the check"}}]}]))
    return run_playbook(tmp_path / "play.yml", inventory=tmp_path / "hosts.yml", check=True, timeout=300)


def test_the_preflight_refuses_a_port_held_by_another_program_and_passes_its_own(tmp_path, holder):
    port, pid = holder("squatter")
    res = _preflight_ports(tmp_path, port)
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert failed and failed[0]["msg"] == (
        "node-x: pairserve_gpustack_worker_port: port %d is already held by squatter (pid %d) on 127.0.0.1: "
        "GPUStack's worker could not bind it. Stop that program or give pairserve_gpustack_worker_port another port"
        % (port, pid)), failed
    assert not [r for r in res.results if r["_task"] == "Reached"]

    port, pid = holder("gpustack")  # a re-run: GPUStack's own worker holds its port
    res = _preflight_ports(tmp_path, port)
    assert res.rc == 0, res.stdout[-2000:]
    assert [r for r in res.results if r["_task"] == "Reached"]


def test_two_inventory_names_for_this_machine_are_refused_by_its_machine_id(tmp_path):
    """Both names reach this machine (local connection): the gathered machine_id is the same, whatever the names."""
    machine_id = Path("/etc/machine-id").read_text().strip() if Path("/etc/machine-id").exists() else ""
    assert machine_id, "this test needs /etc/machine-id on the test machine"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"gpu-1": local, "gpu-1-alias": local}}}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "identity", "hosts": "all", "gather_facts": True, "gather_subset": ["!all"], "tasks": [
            {"name": "Check", "ansible.builtin.include_tasks": str(REPO / "roles" / "preflight" / "tasks" / "identity.yml")},
            {"name": "Reached", "ansible.builtin.debug": {"msg": "after the check"}}]}]))
    res = run_playbook(tmp_path / "play.yml", inventory=tmp_path / "hosts.yml", timeout=300)
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert failed and failed[0]["msg"].startswith(
        "Two inventory hosts are one machine: gpu-1-alias: ansible_host: is the machine gpu-1 is (both have "
        "/etc/machine-id %s)" % machine_id), failed
    res = run_playbook(tmp_path / "play.yml", inventory=tmp_path / "hosts.yml", limit="gpu-1", timeout=300)
    assert res.rc == 0, res.stdout[-2000:]


def _server_move(tmp_path, unit_exists):
    """roles/preflight/tasks/server_move.yml with the unit's path pointed at a file of the test (the task reads one
    path: the test swaps it for a file it controls, the rule stays the task's)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    task_file = tmp_path / "server_move.yml"
    unit = tmp_path / "gpustack-server.service"
    if unit_exists:
        unit.write_text("[Unit]\n")
    source = (REPO / "roles" / "preflight" / "tasks" / "server_move.yml").read_text()
    assert source.count("path: /etc/systemd/system/gpustack-server.service") == 1
    task_file.write_text(source.replace("path: /etc/systemd/system/gpustack-server.service", "path: %s" % unit))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"children": {
        "gpustack_server": {"hosts": {"node-b": local}}, "gpu_nodes": {"hosts": {"node-a": local, "node-b": local}}}}}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "server move", "hosts": "node-a", "gather_facts": False, "tasks": [
            {"name": "Check", "ansible.builtin.include_tasks": str(task_file)},
            {"name": "Reached", "ansible.builtin.debug": {"msg": "after the check"}}]}]))
    return run_playbook(tmp_path / "play.yml", inventory=tmp_path / "hosts.yml", check=True, timeout=300)


def test_a_server_left_on_a_node_no_longer_the_server_is_refused(tmp_path):
    res = _server_move(tmp_path, unit_exists=True)
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    msg = " ".join(failed[0]["msg"].split())
    assert msg.startswith("node-a: groups.gpustack_server: this node runs GPUStack's server"), msg
    assert "but gpustack_server now names node-b" in msg and "put node-a back in gpustack_server" in msg
    assert "systemctl disable --now gpustack-server" in msg and msg.endswith("Nothing was changed.")
    assert _server_move(tmp_path / "fresh", unit_exists=False).rc == 0
