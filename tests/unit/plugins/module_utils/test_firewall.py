"""Tests of module_utils/firewall.py's building blocks: port ranges, TCP ports, interface names and source lists as
the role's variables give them, and the nftables text ruleset() makes of them (sets, the SSH, public, local and
metrics rules, the interfaces judged). The rules of whole nodes (node_rules), problems() and the table loaded into a
real network namespace are tested in tests/unit/plugins/filter/test_firewall.py."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import firewall

EMPTY = {"ipv4": [], "ipv6": []}


@pytest.mark.parametrize("value,expected", [("40000-40063", (40000, 40063)), (" 1-65535 ", (1, 65535)), ("7-7", (7, 7))])
def test_a_port_range_is_first_and_last_port(value, expected):
    assert firewall.port_range(value, "v") == expected


@pytest.mark.parametrize("value,bounds", [("40000", False), ("a-b", False), ("1 - 2", False), ("-5", False),
                                          ("0-10", True), ("10-65536", True), ("20-10", True)])
def test_a_bad_port_range_is_refused_naming_the_variable_and_the_value(value, bounds):
    why = "within 1-65535 with its first port first" if bounds else "such as 40000-40063"
    with pytest.raises(firewall.FirewallError) as info:
        firewall.port_range(value, "pairserve_gpustack_worker_ray_port_range")
    assert str(info.value) == "pairserve_gpustack_worker_ray_port_range: %r is not a port range %s" % (value, why)


@pytest.mark.parametrize("value,port", [(22, 22), ("2222", 2222), (" 22 ", 22), (65535, 65535), (1, 1)])
def test_a_tcp_port_may_come_as_a_number_or_its_text(value, port):
    assert firewall.tcp_port(value, "v") == port


@pytest.mark.parametrize("value", [0, 65536, -1, "ssh", "", None, True, 22.5, "0x16"])
def test_a_value_that_is_not_a_tcp_port_is_refused(value):
    with pytest.raises(firewall.FirewallError, match=r"^pairserve_firewall_ssh_ports: .* is not a TCP port \(1-65535\)$"):
        firewall.tcp_port(value, "pairserve_firewall_ssh_ports")


def test_interface_names_are_checked_as_nftables_matches_them_and_kept_once():
    assert firewall.interfaces(["eth0", "enp1s0f1", "wg*", "eth0", "br-lan.10", "a" * 15]) == [
        "eth0", "enp1s0f1", "wg*", "br-lan.10", "a" * 15]
    assert firewall.interfaces(()) == []
    for bad in ("a" * 16, "eth 0", "*eth", "eth**", "", 3):
        with pytest.raises(firewall.FirewallError, match="^pairserve_firewall_interfaces: .* is not an interface name"):
            firewall.interfaces([bad])
    with pytest.raises(firewall.FirewallError, match="expected a list of interface names, got str"):
        firewall.interfaces("eth0")


def test_a_source_is_a_network_and_an_address_its_own_host_network():
    assert str(firewall.source(" 192.0.2.7 ")) == "192.0.2.7/32"
    assert str(firewall.source("2001:db8::/32")) == "2001:db8::/32"
    with pytest.raises(firewall.FirewallError, match=r"^v: '192.0.2.7/24' is not an IP address or network \("):
        firewall.source("192.0.2.7/24", "v")


def test_a_users_source_list_has_no_loopback_and_drops_networks_inside_another():
    got = firewall.source_list(["10.0.0.0/8", "10.1.2.3", "192.0.2.1", "2001:db8::1", "2001:db8::1"], "v")
    assert got == {"ipv4": ["10.0.0.0/8", "192.0.2.1"], "ipv6": ["2001:db8::1"]}
    assert firewall.source_list([], "v") == EMPTY
    with pytest.raises(firewall.FirewallError, match="^pairserve_firewall_scrape_sources: expected a list .* got dict"):
        firewall.source_list({}, "pairserve_firewall_scrape_sources")


def test_the_table_replaces_itself_whole_and_an_empty_set_has_no_elements_line():
    text = firewall.ruleset("pairserve_node_a", {"ipv4": ["127.0.0.0/8"], "ipv6": ["::1"]}, [22])
    lines = text.splitlines()
    assert lines[:4] == ["table inet pairserve_node_a", "delete table inet pairserve_node_a", "",
                         "table inet pairserve_node_a {"]
    assert "\tset peers_ipv4 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 127.0.0.0/8 }\n\t}" in text
    assert "\tset scrape_ipv6 {\n\t\ttype ipv6_addr\n\t\tflags interval\n\t}" in text
    assert "ssh_ipv4" not in text and "iifname !=" not in text and "jump refused\n\t}" in text
    assert "\t\ttcp dport { 22 } accept" in lines


def test_ports_inside_a_range_are_folded_into_it_and_sorted():
    text = firewall.ruleset("t", EMPTY, [2222, "22", 22], public_ports=[443, "30000-30010", 30005, 80],
                            metrics_ports=[10161, 10151])
    assert "\t\ttcp dport { 22, 2222 } accept" in text
    assert "\t\ttcp dport { 80, 443, 30000-30010 } accept" in text
    assert "\t\ttcp dport { 10151, 10161 } ip saddr @scrape_ipv4 accept" in text
    with pytest.raises(firewall.FirewallError, match="^port range: '9-1' is not a port range"):
        firewall.ruleset("t", EMPTY, [22], public_ports=["9-1"])


def test_ssh_sources_the_interfaces_and_the_local_ports_each_have_their_rule_in_order():
    ssh = {"ipv4": ["198.51.100.0/24"], "ipv6": []}
    text = firewall.ruleset("t", EMPTY, [22], public_ports=[30443], local_ports=[30080], ssh_sources=ssh,
                            interface_names=["eth0", "wg*"])
    rules = [line.strip() for line in text.split("chain input {")[1].split("}\n\n")[0].splitlines()]
    assert rules.index('iifname != { "eth0", "wg*" } accept') == rules.index('iifname "lo" accept') + 1
    order = ["tcp dport { 30080 } jump refused", "tcp dport { 22 } ip saddr @ssh_ipv4 accept",
             "tcp dport { 22 } ip6 saddr @ssh_ipv6 accept", "tcp dport { 30443 } accept", "ip saddr @peers_ipv4 accept"]
    assert [rules.index(rule) for rule in order] == sorted(rules.index(rule) for rule in order)
    assert "\tset ssh_ipv4 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 198.51.100.0/24 }\n\t}" in text


def test_a_table_without_ssh_or_with_a_bad_name_is_refused():
    with pytest.raises(firewall.FirewallError, match="^pairserve_firewall_ssh_ports: no SSH port"):
        firewall.ruleset("t", EMPTY, [])
    for name in ("1table", "pair-serve", "", None, "a" * 65):
        with pytest.raises(firewall.FirewallError, match="^pairserve_firewall_table: .* is not an nftables table name"):
            firewall.ruleset(name, EMPTY, [22])
    assert firewall.ruleset("a" * 64, EMPTY, [22]).startswith("table inet " + "a" * 64 + "\n")
