# -*- coding: utf-8 -*-
# Copyright: (c) 2026, pairserve
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host firewall's rules, one owner: who may open a connection to a node, on which port.

Deny by default (role pairserve.llm.firewall, docs/network.md): a node accepts new inbound connections from its
peers (every node of the site, the Ansible controller, loopback and ``pairserve_firewall_allowed_sources``) on any
port; from anywhere else only on SSH and, on the GPUStack server, on the front door (the HTTPS front, or the plain
API while HTTPS is off); metrics ports from the scrape sources too. Everything else is refused, whatever port a
process opens (vLLM's and torch's internal channels, GPUStack's proxy port). Replies to the node's own
connections, the ICMP that IPv4 and IPv6 need, and IPv6 neighbour discovery pass. The rules live in a table of
their own, so the host's other rules stay as they are.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

# An nftables table name (the lab runs one per node, since its nodes share the host's network).
TABLE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}\Z")
PORT_RANGE = re.compile(r"^(\d{1,5})-(\d{1,5})\Z")
LOOPBACK = ("127.0.0.0/8", "::1/128")
# GPUStack 2.2.3's server metrics port (its ``metrics_port``; the collection leaves it at GPUStack's default).
GPUSTACK_SERVER_METRICS_PORT = 10161
# An interface name as nftables' iifname matches it: up to 15 characters (IFNAMSIZ), a trailing * a prefix.
INTERFACE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}\*?\Z")
# ICMP that the network needs from anyone: errors (path MTU discovery), ping, IPv6 neighbour and router discovery
# and multicast listener queries.
ICMP_TYPES = ("destination-unreachable", "time-exceeded", "parameter-problem", "echo-request")
ICMPV6_TYPES = ("destination-unreachable", "packet-too-big", "time-exceeded", "parameter-problem", "echo-request",
                "nd-router-solicit", "nd-router-advert", "nd-neighbor-solicit", "nd-neighbor-advert",
                "mld-listener-query")


class FirewallError(ValueError):
    """A firewall setting that cannot be turned into a rule; the message names the value and what is expected."""


def port_range(value, variable):
    """(first, last) of an ``A-B`` range, 1 <= A <= B <= 65535."""
    match = PORT_RANGE.match(str(value).strip())
    if not match:
        raise FirewallError("%s: %r is not a port range such as 40000-40063" % (variable, value))
    first, last = int(match.group(1)), int(match.group(2))
    if not 1 <= first <= last <= 65535:
        raise FirewallError("%s: %r is not a port range within 1-65535 with its first port first" % (variable, value))
    return first, last


def source(value, variable="pairserve_firewall_allowed_sources"):
    """One allowed source as a network (an address is its own /32 or /128); host bits set are refused."""
    if isinstance(value, bool) or not isinstance(value, str) or not value.strip():
        raise FirewallError("%s: %r is not an IP address or network (such as 192.0.2.10 or 192.0.2.0/24)"
                            % (variable, value))
    if "%" in value:
        # Python reads fe80::1%eth0 as a network; nftables cannot match an address's zone
        raise FirewallError("%s: %r is a scoped address: give it without its %%zone" % (variable, value))
    try:
        return ipaddress.ip_network(value.strip(), strict=True)
    except ValueError as exc:
        raise FirewallError("%s: %r is not an IP address or network (%s)" % (variable, value, exc))


def sources(derived, extra):
    """The allowed sources: loopback, the derived addresses (server, controller, Ansible controller; each a string
    or {"value", "origin"} naming the fact it was read from, for the error; empty and duplicate entries dropped)
    and the user's ``extra`` list, as {"ipv4": [...], "ipv6": [...]} of networks in a stable order with no entry
    inside another (nftables refuses overlapping interval elements)."""
    if not isinstance(extra, (list, tuple)):
        raise FirewallError("pairserve_firewall_allowed_sources: expected a list of addresses or networks, got %s"
                            % type(extra).__name__)
    networks = [ipaddress.ip_network(net) for net in LOOPBACK]
    for value in derived:
        # a derived source comes as {"value", "origin"} (the fact and host it was read from) or a bare string
        origin = "derived source"
        if isinstance(value, dict):
            value, origin = value.get("value"), value.get("origin") or origin
        if isinstance(value, str) and "%" in value:
            value = value.split("%", 1)[0]  # a link-local fact's zone: the address is what the table matches
        if value:
            networks.append(source(value, origin))
    networks.extend(source(value) for value in extra)
    return _by_family(networks)


def _by_family(networks):
    """{"ipv4", "ipv6"}: the networks in a stable order, duplicates and networks inside another dropped (nftables
    refuses overlapping interval elements)."""
    out = {"ipv4": [], "ipv6": []}
    for family, version in (("ipv4", 4), ("ipv6", 6)):
        nets = sorted(set(net for net in networks if net.version == version),
                      key=lambda net: (net.network_address, net.prefixlen))
        kept = []
        for net in nets:
            if not any(net.subnet_of(other) for other in kept):
                kept.append(net)
        out[family] = [net.with_prefixlen if net.prefixlen < net.max_prefixlen else str(net.network_address)
                       for net in kept]
    return out


def source_list(values, variable):
    """A user's list of sources (scrape sources, SSH sources) as {"ipv4", "ipv6"}, without loopback."""
    if not isinstance(values, (list, tuple)):
        raise FirewallError("%s: expected a list of addresses or networks, got %s" % (variable, type(values).__name__))
    return _by_family([source(value, variable) for value in values])


def _entry_problems(values, variable, check, what):
    """Every bad entry of a user's list (not only the first), each as the problem text check() raises."""
    if values is None:
        return []
    if not isinstance(values, (list, tuple)):
        return ["expected a list of %s, got %s" % (what, type(values).__name__)]
    found = []
    for value in values:
        try:
            check(value, variable)
        except FirewallError as exc:
            found.append(str(exc).split(": ", 1)[1])
    return found


def problems(view):
    """The firewall settings' problems for one host's view, as (variable, problem) pairs; the validation play's."""
    out = []
    table = view.get("pairserve_firewall_table")
    if table is not None and not (isinstance(table, str) and TABLE.match(table)):
        out.append(("pairserve_firewall_table", "%r is not an nftables table name (a letter, then letters, digits "
                    "and underscores)" % (table,)))
    lists = (("pairserve_firewall_allowed_sources", source, "addresses or networks"),
             ("pairserve_firewall_scrape_sources", source, "addresses or networks"),
             ("pairserve_firewall_ssh_sources", source, "addresses or networks"),
             ("pairserve_firewall_ssh_ports", tcp_port, "TCP ports"))
    for variable, check, what in lists:
        out.extend((variable, problem) for problem in _entry_problems(view.get(variable), variable, check, what))
    if view.get("pairserve_firewall_interfaces") is not None:
        try:
            interfaces(view["pairserve_firewall_interfaces"])
        except FirewallError as exc:
            out.append(("pairserve_firewall_interfaces", str(exc).split(": ", 1)[1]))
    for variable in ("pairserve_gpustack_worker_service_port_range", "pairserve_gpustack_worker_ray_port_range"):
        value = view.get(variable)
        if value:
            try:
                port_range(value, variable)
            except FirewallError as exc:
                out.append((variable, str(exc).split(": ", 1)[1]))
    return out


def tcp_port(value, variable):
    """One TCP port, 1-65535."""
    if isinstance(value, bool) or not str(value).strip().isdigit() or not 1 <= int(value) <= 65535:
        raise FirewallError("%s: %r is not a TCP port (1-65535)" % (variable, value))
    return int(value)


def interfaces(values, variable="pairserve_firewall_interfaces"):
    """The interfaces the table judges (empty: all but loopback), checked as nftables matches them."""
    if not isinstance(values, (list, tuple)):
        raise FirewallError("%s: expected a list of interface names, got %s" % (variable, type(values).__name__))
    out = []
    for value in values:
        if not isinstance(value, str) or not INTERFACE.match(value):
            raise FirewallError("%s: %r is not an interface name (1-15 letters, digits or _.:@-, a trailing * for "
                                "a prefix such as eth*)" % (variable, value))
        if value not in out:
            out.append(value)
    return out


def _port_elements(ports):
    """Sorted, de-duplicated nftables set elements of ports (ints) and ranges ("A-B")."""
    singles, spans = set(), set()
    for port in ports:
        if isinstance(port, str) and "-" in port:
            spans.add(port_range(port, "port range"))
        else:
            singles.add(int(port))
    singles = set(p for p in singles if not any(lo <= p <= hi for lo, hi in spans))
    items = [(p, p) for p in singles] + sorted(spans)
    return [str(lo) if lo == hi else "%d-%d" % (lo, hi) for lo, hi in sorted(items)]


def _set(name, family, elements):
    lines = ["\tset %s {" % name, "\t\ttype %s_addr" % family, "\t\tflags interval"]
    if elements:
        lines.append("\t\telements = { %s }" % ", ".join(elements))
    lines.append("\t}")
    return lines


def ruleset(table, peers, ssh_ports, public_ports=(), local_ports=(), metrics_ports=(), scrape=None,
            ssh_sources=None, interface_names=()):
    """The nftables text of one node's table (deny by default), loaded with ``nft -f`` in one transaction.

    ``peers``, ``scrape`` and ``ssh_sources`` are :func:`sources`-style {"ipv4", "ipv6"} dicts (``ssh_sources``
    None: SSH from anywhere); ports are ints, ranges "A-B"; ``local_ports`` answer loopback alone (GPUStack's plain
    API while the HTTPS front stands before it), even to peers."""
    if not isinstance(table, str) or not TABLE.match(table):
        raise FirewallError("pairserve_firewall_table: %r is not an nftables table name" % (table,))
    scrape = scrape or {"ipv4": [], "ipv6": []}
    ssh = _port_elements(ssh_ports)
    if not ssh:
        raise FirewallError("pairserve_firewall_ssh_ports: no SSH port: the table would cut Ansible off this node")
    lines = ["table inet %s" % table, "delete table inet %s" % table, "", "table inet %s {" % table]
    lines += _set("peers_ipv4", "ipv4", peers["ipv4"]) + _set("peers_ipv6", "ipv6", peers["ipv6"])
    lines += _set("scrape_ipv4", "ipv4", scrape["ipv4"]) + _set("scrape_ipv6", "ipv6", scrape["ipv6"])
    if ssh_sources is not None:
        lines += _set("ssh_ipv4", "ipv4", ssh_sources["ipv4"]) + _set("ssh_ipv6", "ipv6", ssh_sources["ipv6"])
    lines += ["", "\tchain input {", "\t\ttype filter hook input priority filter; policy accept;",
              '\t\tiifname "lo" accept']
    names = interfaces(list(interface_names))
    if names:
        lines.append("\t\tiifname != { %s } accept" % ", ".join('"%s"' % name for name in names))
    lines += ["\t\tct state established,related accept", "\t\tct state invalid drop",
              "\t\tip protocol icmp icmp type { %s } accept" % ", ".join(ICMP_TYPES),
              "\t\tip6 nexthdr ipv6-icmp icmpv6 type { %s } accept" % ", ".join(ICMPV6_TYPES),
              "\t\tip6 saddr fe80::/10 udp dport 546 accept"]
    local = _port_elements(local_ports)
    if local:
        lines.append("\t\ttcp dport { %s } jump refused" % ", ".join(local))
    if ssh_sources is None:
        lines.append("\t\ttcp dport { %s } accept" % ", ".join(ssh))
    else:
        lines.append("\t\ttcp dport { %s } ip saddr @ssh_ipv4 accept" % ", ".join(ssh))
        lines.append("\t\ttcp dport { %s } ip6 saddr @ssh_ipv6 accept" % ", ".join(ssh))
    public = _port_elements(public_ports)
    if public:
        lines.append("\t\ttcp dport { %s } accept" % ", ".join(public))
    lines += ["\t\tip saddr @peers_ipv4 accept", "\t\tip6 saddr @peers_ipv6 accept"]
    metrics = _port_elements(metrics_ports)
    if metrics:
        lines.append("\t\ttcp dport { %s } ip saddr @scrape_ipv4 accept" % ", ".join(metrics))
        lines.append("\t\ttcp dport { %s } ip6 saddr @scrape_ipv6 accept" % ", ".join(metrics))
    lines += ["\t\tjump refused", "\t}", "",
              "\tchain refused {",
              "\t\tmeta pkttype != host counter drop",
              "\t\tmeta l4proto tcp counter reject with tcp reset",
              "\t\tcounter reject with icmpx type admin-prohibited",
              "\t}", "}"]
    return "\n".join(lines) + "\n"


def node_rules(spec):
    """One node's table from the role's inputs (the filter pairserve.llm.firewall_ruleset): {"text", "ports"}.

    ``spec`` keys: table, derived (peer sources with their origins), allowed_sources, scrape_sources, ssh_ports,
    ssh_sources (empty: anywhere), interfaces, server (bool), tls (bool), api_port, tls_port, worker (bool),
    worker_metrics_port, controller_metrics_port (0: none), controller (the address the node sees the Ansible
    controller's SSH connection come from; empty on a local connection): a table that would refuse it at SSH is
    refused, since it would cut the run that loads it off the node."""
    peers = sources(list(spec.get("derived") or []), spec.get("allowed_sources") or [])
    scrape = source_list(spec.get("scrape_sources") or [], "pairserve_firewall_scrape_sources")
    ssh_list = spec.get("ssh_sources") or []
    ssh_sources = source_list(ssh_list, "pairserve_firewall_ssh_sources") if ssh_list else None
    ssh = [tcp_port(port, "pairserve_firewall_ssh_ports") for port in spec.get("ssh_ports") or []]
    public, local, metrics = [], [], []
    if spec.get("server"):
        api = tcp_port(spec.get("api_port"), "pairserve_gpustack_api_port")
        if spec.get("tls"):
            public.append(tcp_port(spec.get("tls_port"), "pairserve_gpustack_tls_port"))
            local.append(api)
        else:
            public.append(api)
        metrics.append(GPUSTACK_SERVER_METRICS_PORT)
        controller = spec.get("controller_metrics_port") or 0
        if controller:
            metrics.append(tcp_port(controller, "pairserve_controller_metrics_port"))
    if spec.get("worker"):
        metrics.append(tcp_port(spec.get("worker_metrics_port"), "pairserve_gpustack_worker_metrics_port"))
    controller = spec.get("controller") or ""
    if controller and ssh_sources is not None:
        address = ipaddress.ip_address(controller.split("%", 1)[0])
        admitted = [ipaddress.ip_network(net) for family in ("ipv4", "ipv6")
                    for net in peers[family] + ssh_sources[family]]
        if not any(address in net for net in admitted):
            raise FirewallError("pairserve_firewall_ssh_sources: the Ansible controller's address %s (SSH_CLIENT) is "
                                "neither an SSH source nor a peer: the table would cut this run off the node. Add it "
                                "to pairserve_firewall_ssh_sources, or set pairserve_firewall_allow_ansible_controller"
                                % controller)
    text = ruleset(spec.get("table"), peers, ssh, public, local, metrics, scrape, ssh_sources,
                   spec.get("interfaces") or [])
    return {"text": text, "peers": peers, "ssh_ports": _port_elements(ssh), "public_ports": _port_elements(public),
            "local_ports": _port_elements(local), "metrics_ports": _port_elements(metrics)}
