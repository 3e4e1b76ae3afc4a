"""The URL a GPU node's worker registers with (role gpustack_worker's default pairserve_gpustack_server_url): the
server host's address at the server host's ports, HTTPS on its front's port when the server host has a certificate,
and the server's own fact when a run already set it. Read through real Ansible from the role's defaults file."""

from __future__ import annotations

import sys

import yaml

from support.ansible_runner import REPO, run_playbook

DEFAULTS = REPO / "roles" / "gpustack_worker" / "defaults" / "main.yml"


def _url(tmp_path, server_vars: dict) -> str:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"children": {
        "gpustack_server": {"hosts": {"srv": dict(host, **server_vars)}},
        "gpu_nodes": {"hosts": {"node-b": dict(host)}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    # The server's address is a fact of the server host (setup's default_ipv4), set here as setup would cache it.
    facts = {"name": "Facts", "ansible.builtin.set_fact": {"ansible_default_ipv4": {"address": "192.0.2.10"},
                                                           "cacheable": True}}
    load = {"name": "Load the role's defaults", "ansible.builtin.include_vars": {"file": str(DEFAULTS)}}
    show = {"name": "Url", "ansible.builtin.debug": {"msg": "{{ pairserve_gpustack_server_url }}"}}
    play = [{"hosts": "srv", "gather_facts": False, "tasks": [facts]},
            {"hosts": "node-b", "gather_facts": False, "tasks": [load, show]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play), encoding="utf-8")
    res = run_playbook(tmp_path / "play.yml", inventory=tmp_path / "hosts.yml")
    assert res.rc == 0, res.stdout[-3000:]
    return res.by_task["Url"]["msg"]


def test_the_worker_registers_at_the_server_hosts_address_and_ports(tmp_path):
    assert _url(tmp_path, {}) == "http://192.0.2.10:30080"
    assert _url(tmp_path, {"pairserve_gpustack_api_port": 31080}) == "http://192.0.2.10:31080"
    assert _url(tmp_path, {"pairserve_gpustack_tls_cert": "PEM", "pairserve_gpustack_tls_port": 8443}) \
        == "https://192.0.2.10:8443"
    assert _url(tmp_path, {"pairserve_gpustack_server_url": "https://gpustack.example:443"}) \
        == "https://gpustack.example:443"
