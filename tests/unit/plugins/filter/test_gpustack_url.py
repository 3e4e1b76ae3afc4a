"""The GPUStack server's URL (filter pairserve.llm.gpustack_url): HTTPS on the front's port when the server has a
certificate, plain HTTP on GPUStack's port otherwise; IPv6 in brackets; a bad address or port refused by name. And
which host the server is, with its ports and local API URL (filter pairserve.llm.gpustack_server), the one rule every
role reads them by."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.filter.gpustack_url import gpustack_server, gpustack_url
from support.ansible_runner import REPO, run_playbook

SERVER_DEFAULTS = REPO / "roles" / "gpustack_server" / "defaults" / "main.yml"  # the ports' one owner


@pytest.mark.parametrize("args,url", [
    (("192.0.2.10", 30080, 30443, False), "http://192.0.2.10:30080"),
    (("192.0.2.10", 30080, 30443, True), "https://192.0.2.10:30443"),
    (("node-a.example", "30080", "8443", True), "https://node-a.example:8443"),
    (("2001:db8::10", 30080, 30443, True), "https://[2001:db8::10]:30443"),
    (("[2001:db8::10]", 30080, 30443, False), "http://[2001:db8::10]:30080"),
])
def test_the_url_follows_the_certificate(args, url):
    assert gpustack_url(*args) == url


@pytest.mark.parametrize("args,words", [
    (("", 30080, 30443, False), "pairserve_gpustack_server_address"),
    (("http://node-a", 30080, 30443, False), "pairserve_gpustack_server_address"),
    (("node-a", 0, 30443, False), "pairserve_gpustack_api_port"),
    (("node-a", 30080, "x", True), "pairserve_gpustack_tls_port"),
    (("node-a", 30080, 70000, True), "pairserve_gpustack_tls_port"),
])
def test_a_bad_address_or_port_is_named(args, words):
    with pytest.raises(AnsibleFilterError, match=words):
        gpustack_url(*args)


# -- which host is the server, its ports and its local API URL (filter pairserve.llm.gpustack_server) ------------

def test_the_server_is_the_first_host_of_its_group_at_the_role_defaults_ports():
    defaults = yaml.safe_load(SERVER_DEFAULTS.read_text())  # the gpustack_server role's: the one owner
    got = gpustack_server({"gpustack_server": ["node-a"], "gpu_nodes": ["node-a", "node-b"]}, {"node-a": {}})
    assert got == {"host": "node-a", "api_port": defaults["pairserve_gpustack_api_port"],
                   "tls_port": defaults["pairserve_gpustack_tls_port"],
                   "local_url": "http://127.0.0.1:%d" % defaults["pairserve_gpustack_api_port"]}
    server_vars = {"pairserve_gpustack_api_port": "31080", "pairserve_gpustack_tls_port": 8443}
    got = gpustack_server({"gpustack_server": ["srv"]}, {"srv": server_vars})
    assert (got["api_port"], got["tls_port"], got["local_url"]) == (31080, 8443, "http://127.0.0.1:31080")
    # a host the role was told (the worker's pairserve_gpustack_server_host) wins over the group's first
    told = gpustack_server({"gpustack_server": ["node-a"]}, {"node-a": {}, "srv": server_vars}, "srv")
    assert (told["host"], told["api_port"]) == ("srv", 31080)


def test_without_a_server_host_the_ports_are_the_defaults_and_a_bad_port_is_named():
    defaults = yaml.safe_load(SERVER_DEFAULTS.read_text())
    # the URL filter's ports not given: the same owner
    assert gpustack_url("192.0.2.10") == "http://192.0.2.10:%d" % defaults["pairserve_gpustack_api_port"]
    assert gpustack_url("192.0.2.10", tls=True) == "https://192.0.2.10:%d" % defaults["pairserve_gpustack_tls_port"]
    assert gpustack_server({"gpu_nodes": ["node-b"]}, {}) == {
        "host": "", "api_port": defaults["pairserve_gpustack_api_port"],
        "tls_port": defaults["pairserve_gpustack_tls_port"],
        "local_url": "http://127.0.0.1:%d" % defaults["pairserve_gpustack_api_port"]}
    with pytest.raises(AnsibleFilterError, match="pairserve_gpustack_api_port of srv is 'x', not a TCP port"):
        gpustack_server({"gpustack_server": ["srv"]}, {"srv": {"pairserve_gpustack_api_port": "x"}})


def test_through_ansible_the_servers_own_inventory_value_counts_on_every_host(tmp_path):
    # A port set on the server host only: a GPU node's play reads the server's, not its own default.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": {
        "gpustack_server": {"hosts": {"srv": {"pairserve_gpustack_api_port": 31080}}},
        "gpu_nodes": {"hosts": {"gpu": {}}}}}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "gpu", "gather_facts": False, "tasks": [
        {"name": "Server", "ansible.builtin.set_fact": {"server": "{{ groups | pairserve.llm.gpustack_server(hostvars) }}"}}]}]))
    res = run_playbook(playbook, inventory=inventory)
    assert res.rc == 0, res.stdout[-2000:]
    assert res.by_task["Server"]["ansible_facts"]["server"]["local_url"] == "http://127.0.0.1:31080"
