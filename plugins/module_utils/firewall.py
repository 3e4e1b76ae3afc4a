# -*- coding: utf-8 -*-
# Copyright: (c) 2026, pairserve
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host firewall's rules, one owner: which sources may reach a GPU node's guarded ports, and which ports those are.

Only the GPUStack server (which proxies the route to the replicas and talks to the worker API), the controller
service (on the server's node), the Ansible controller (the bench play measures replicas directly) and the sources
the user adds may reach a node's replica ports, its worker API and metrics port and its Ray range; loopback always
may. Everything else that reaches those ports is refused (TCP reset). No other port is touched, and the rules live
in a table of their own, so the host's other rules stay as they are.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

# GPUStack 2.2.3's worker defaults when the collection leaves its range variables empty (gpustack start --help).
DEFAULT_SERVICE_PORT_RANGE = "40000-40063"
DEFAULT_RAY_PORT_RANGE = "41000-41999"
# An nftables table name (the lab runs one per node, since its nodes share the host's network).
TABLE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
PORT_RANGE = re.compile(r"^(\d{1,5})-(\d{1,5})$")
LOOPBACK = ("127.0.0.0/8", "::1/128")


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


def guarded_ports(worker_port, metrics_port, service_range="", ray_range=""):
    """The TCP ports only the allowed sources reach, as nftables set elements (``10150``, ``40000-40063``)."""
    out = []
    for variable, port in (("pairserve_gpustack_worker_port", worker_port),
                           ("pairserve_gpustack_worker_metrics_port", metrics_port)):
        if isinstance(port, bool) or not str(port).isdigit() or not 1 <= int(port) <= 65535:
            raise FirewallError("%s: %r is not a TCP port (1-65535)" % (variable, port))
        out.append(str(int(port)))
    for variable, value, default in (("pairserve_gpustack_worker_service_port_range", service_range,
                                      DEFAULT_SERVICE_PORT_RANGE),
                                     ("pairserve_gpustack_worker_ray_port_range", ray_range, DEFAULT_RAY_PORT_RANGE)):
        first, last = port_range(value or default, variable)
        out.append("%d-%d" % (first, last))
    return out


def problems(view):
    """The firewall settings' problems for one host's view, as (variable, problem) pairs; the validation play's."""
    out = []
    table = view.get("pairserve_firewall_table")
    if table is not None and not (isinstance(table, str) and TABLE.match(table)):
        out.append(("pairserve_firewall_table", "%r is not an nftables table name (a letter, then letters, digits "
                    "and underscores)" % (table,)))
    extra = view.get("pairserve_firewall_allowed_sources")
    if extra is not None:
        if not isinstance(extra, (list, tuple)):
            out.append(("pairserve_firewall_allowed_sources", "expected a list of addresses or networks, got %s"
                        % type(extra).__name__))
        else:
            for value in extra:
                try:
                    source(value)
                except FirewallError as exc:
                    out.append(("pairserve_firewall_allowed_sources", str(exc).split(": ", 1)[1]))
    for variable in ("pairserve_gpustack_worker_service_port_range", "pairserve_gpustack_worker_ray_port_range"):
        value = view.get(variable)
        if value:
            try:
                port_range(value, variable)
            except FirewallError as exc:
                out.append((variable, str(exc).split(": ", 1)[1]))
    return out
