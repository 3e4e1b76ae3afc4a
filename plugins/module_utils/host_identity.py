# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Two inventory hosts that reach one machine, told from the inventory alone (the validation play) and from the
machines' own ids (the preflight role, before anything is installed).

Two names for one machine would install GPUStack's server and a worker, or two workers, over each other, and give
the same GPUs to two replicas; the GPU check (inventory_check.gpu_conflicts) sees it only once the pairs are detected.
"""

from __future__ import annotations

# The port each connection plugin reaches when the inventory names none.
DEFAULT_PORTS = {"ssh": 22, "paramiko": 22, "paramiko_ssh": 22, "smart": 22}
# Connections that reach the controller itself whatever the address: every such host is the controller.
LOCAL = ("local",)
LOOPBACK = ("127.0.0.1", "localhost", "::1", "ip6-localhost")
VARIABLES = ("ansible_host", "ansible_port", "ansible_connection")


def _connection(view):
    name = str(view.get("ansible_connection") or "ssh")
    return name.rsplit(".", 1)[-1]  # ansible.builtin.ssh -> ssh


def endpoint(host, view):
    """What a host's connection reaches: (connection, address, port); None when it cannot be told."""
    connection = _connection(view)
    if connection in LOCAL:
        return ("local", "the controller", None)
    address = str(view.get("ansible_host") or host).strip().lower()
    if address in LOOPBACK:
        address = "127.0.0.1"
    port = view.get("ansible_port")
    try:
        port = int(port) if port not in (None, "") else DEFAULT_PORTS.get(connection)
    except (TypeError, ValueError):
        return None
    return (connection if connection not in DEFAULT_PORTS else "ssh", address, port)


def same_machine_problems(views, hosts):
    """[(host, variable, problem)] for every host that reaches the machine an earlier host (by name) reaches."""
    first, out = {}, []
    for host in sorted(hosts):
        key = endpoint(host, views.get(host) or {})
        if key is None:
            continue
        if key in first:
            where = "the controller (ansible_connection local)" if key[0] == "local" else \
                "%s port %s (%s)" % (key[1], key[2], key[0])
            out.append((host, "ansible_host", "reaches the same machine as %s: %s. Two inventory names for one "
                        "machine would install GPUStack twice over each other and hand its GPUs to two replicas: "
                        "give each host its own ansible_host/ansible_port, or remove one" % (first[key], where)))
        else:
            first[key] = host
    return out


def machine_id_problems(ids_by_host):
    """[(host, variable, problem)] for hosts whose /etc/machine-id is another host's ({host: id}); empty ids
    (a container without one) are not compared."""
    first, out = {}, []
    for host in sorted(ids_by_host or {}):
        machine = str(ids_by_host[host] or "").strip()
        if not machine:
            continue
        if machine in first:
            out.append((host, "ansible_host", "is the machine %s is (both have /etc/machine-id %s): two inventory "
                        "names for one machine; give each host its own ansible_host/ansible_port, or remove one"
                        % (first[machine], machine)))
        else:
            first[machine] = host
    return out
