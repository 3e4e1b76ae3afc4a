# -*- coding: utf-8 -*-
# Copyright: (c) 2026, pairserve
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a Prometheus finds the service's metrics, as a file_sd target list (one owner of the jobs and labels).

Jobs: ``gpustack-server`` (the server's metrics port), ``gpustack-worker`` (each GPU node's worker metrics port),
``vllm`` (each running replica's own ``/metrics``, at the address and port GPUStack gave its instance) and, when the
controller runs, ``pairserve-controller`` (its own ``/metrics`` on the server node). Every group
carries ``pairserve_host`` (the inventory host); replicas also ``pairserve_replica`` (GPUStack's model name). The
list is sorted, so the file changes only when a target does.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# GPUStack's default metrics port of the server (gpustack start --metrics-port); the collection does not change it.
SERVER_METRICS_PORT = 10161


class TargetsError(ValueError):
    """An input the target list cannot be built from; the message names it."""


def _address(value, what):
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise TargetsError("%s: %r is not an address" % (what, value))
    return "[%s]" % value if ":" in value and not value.startswith("[") else value


def _port(value, what):
    if isinstance(value, bool) or not str(value).isdigit() or not 1 <= int(value) <= 65535:
        raise TargetsError("%s: %r is not a TCP port" % (what, value))
    return int(value)


def targets(server, nodes, instances, route_models=None):
    """The file_sd list.

    server: {"host", "address", "metrics_port", "controller_metrics_port" (0 or absent: no controller)};
    nodes: {host: {"address", "metrics_port"}}; instances: GPUStack's model instances (``model_name``,
    ``worker_name``, ``worker_ip``, ``port``, ``state``); route_models: the replica names the collection
    registered (others, and instances not running, are left out)."""
    out = [{"targets": ["%s:%d" % (_address(server.get("address"), "server address"),
                                   _port(server.get("metrics_port", SERVER_METRICS_PORT), "server metrics port"))],
            "labels": {"job": "gpustack-server", "pairserve_host": str(server.get("host", ""))}}]
    if server.get("controller_metrics_port"):
        out.append({"targets": ["%s:%d" % (_address(server.get("address"), "server address"),
                                           _port(server["controller_metrics_port"], "controller metrics port"))],
                    "labels": {"job": "pairserve-controller", "pairserve_host": str(server.get("host", ""))}})
    for host in sorted(nodes):
        node = nodes[host]
        out.append({"targets": ["%s:%d" % (_address(node.get("address"), "%s address" % host),
                                           _port(node.get("metrics_port"), "%s worker metrics port" % host))],
                    "labels": {"job": "gpustack-worker", "pairserve_host": host}})
    wanted = None if route_models is None else set(route_models)
    replicas = []
    for inst in instances or []:
        name = inst.get("model_name")
        if (wanted is not None and name not in wanted) or inst.get("state") != "running":
            continue
        replicas.append({"targets": ["%s:%d" % (_address(inst.get("worker_ip"), "%s worker_ip" % name),
                                                _port(inst.get("port"), "%s port" % name))],
                         "labels": {"job": "vllm", "pairserve_host": str(inst.get("worker_name", "")),
                                    "pairserve_replica": name}})
    out.extend(sorted(replicas, key=lambda group: (group["labels"]["pairserve_replica"], group["targets"][0])))
    return out
