"""plugins/module_utils/scrape_targets.py on the edges of its input: port boundaries and spellings (text digits, a
boolean), addresses (whitespace, missing, IPv6 already bracketed), a replica's bad address named by the replica, an
empty model list, two instances of one replica in a stable order, and missing host names.

The seed's target list, the controller's job and the filter through Ansible are in
tests/unit/plugins/filter/test_scrape_targets.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import scrape_targets as st

SERVER = {"host": "node-a", "address": "192.0.2.10"}


def running(name, ip, port, worker="node-b"):
    return {"model_name": name, "worker_name": worker, "worker_ip": ip, "port": port, "state": "running"}


@pytest.mark.parametrize("port, target", [(1, "192.0.2.11:1"), (65535, "192.0.2.11:65535"), ("10151", "192.0.2.11:10151")])
def test_ports_from_1_to_65535_in_any_spelling_of_digits(port, target):
    got = st.targets(SERVER, {"node-b": {"address": "192.0.2.11", "metrics_port": port}}, [])
    assert got[1] == {"targets": [target], "labels": {"job": "gpustack-worker", "pairserve_host": "node-b"}}


@pytest.mark.parametrize("port", [0, 65536, True, -1, "10 151", None, 10151.0])
def test_anything_else_is_no_port(port):
    with pytest.raises(st.TargetsError) as info:
        st.targets(SERVER, {"node-b": {"address": "192.0.2.11", "metrics_port": port}}, [])
    assert str(info.value) == "node-b worker metrics port: %r is not a TCP port" % (port,)


@pytest.mark.parametrize("address", ["node a", None, "", 3232235531, "192.0.2.11\n"])
def test_an_address_with_whitespace_or_of_no_text_is_refused(address):
    with pytest.raises(st.TargetsError, match="node-b address: .* is not an address"):
        st.targets(SERVER, {"node-b": {"address": address, "metrics_port": 10151}}, [])


def test_host_names_and_bracketed_ipv6_are_taken_as_they_are():
    nodes = {"gpu-1.example.org": {"address": "gpu-1.example.org", "metrics_port": 10151},
             "v6": {"address": "[2001:db8::11]", "metrics_port": 10151}}
    got = st.targets({"address": "fe80::1%eth0"}, nodes, [])
    assert [g["targets"][0] for g in got] == ["[fe80::1%eth0]:10161", "gpu-1.example.org:10151", "[2001:db8::11]:10151"]
    assert got[0]["labels"] == {"job": "gpustack-server", "pairserve_host": ""}  # no host given: an empty label


def test_a_replicas_bad_address_or_port_is_named_by_the_replica():
    with pytest.raises(st.TargetsError, match="qwen-node-b worker_ip: None is not an address"):
        st.targets(SERVER, {}, [running("qwen-node-b", None, 40000)])
    with pytest.raises(st.TargetsError, match="qwen-node-b port: '' is not a TCP port"):
        st.targets(SERVER, {}, [running("qwen-node-b", "192.0.2.11", "")])
    # an instance left out (not running, or not the collection's) is never checked
    stopped = dict(running("qwen-node-b", None, None), state="error")
    assert len(st.targets(SERVER, {}, [stopped, running("other", None, None)], ["qwen-node-b"])) == 1


def test_an_empty_model_list_leaves_every_replica_out_and_none_as_instances_is_no_instance():
    instances = [running("qwen-node-b", "192.0.2.11", 40000)]
    assert [g["labels"]["job"] for g in st.targets(SERVER, {}, instances, [])] == ["gpustack-server"]
    assert st.targets(SERVER, {}, None) == [
        {"targets": ["192.0.2.10:10161"], "labels": {"job": "gpustack-server", "pairserve_host": "node-a"}}]


def test_instances_of_one_replica_are_ordered_by_their_target_text():
    instances = [running("qwen-node-b", "192.0.2.11", 40002), running("qwen-node-a", "192.0.2.12", 40000, "node-a"),
                 running("qwen-node-b", "192.0.2.11", 40001), {"model_name": "qwen-node-b", "worker_ip": "192.0.2.9",
                                                               "port": 9, "state": "running"}]
    got = [(g["labels"]["pairserve_replica"], g["labels"]["pairserve_host"], g["targets"][0])
           for g in st.targets(SERVER, {}, instances)[1:]]
    assert got == [("qwen-node-a", "node-a", "192.0.2.12:40000"), ("qwen-node-b", "node-b", "192.0.2.11:40001"),
                   ("qwen-node-b", "node-b", "192.0.2.11:40002"), ("qwen-node-b", "", "192.0.2.9:9")]
