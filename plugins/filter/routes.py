# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.route_wanted, route_drain_plan, route_weight_problems, controller_static_weights,
route_keep_unknown, replica_names_of, route_carriers and route_carrier_problems (documented in their .yml files);
the rules are module_utils/routes.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import reach, routes


def route_wanted(replicas_by_host, mode, weights, route_name, split_routes=None):
    if not isinstance(replicas_by_host, dict):
        raise AnsibleFilterError("pairserve.llm.route_wanted: expected {host: [replica, ...]}, got %s"
                                 % type(replicas_by_host).__name__)
    try:
        return routes.wanted_routes(mode, replicas_by_host, weights or {}, route_name, split_routes or {})
    except (KeyError, TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.route_wanted: %s" % err) from err


def route_drain_plan(routes_now, mine, new_names, share_when_zero=None):
    if not isinstance(routes_now, list):
        raise AnsibleFilterError("pairserve.llm.route_drain_plan: expected the routes as a list")
    try:
        return routes.drain_plan(routes_now, list(mine), list(new_names), share_when_zero or {})
    except (KeyError, TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.route_drain_plan: %s" % err) from err


def route_weight_problems(weights, hosts):
    """What is wrong with pairserve_route_weights for a pooled route over ``hosts`` (the validation play's rule)."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("pairserve.llm.route_weight_problems: expected the gpu_nodes hosts as a list")
    return routes.weight_problems(weights, list(hosts))


def route_keep_unknown(wanted, routes_now, models, unknown, route_names, reasons=None):
    if not isinstance(wanted, list) or not isinstance(routes_now, list) or not isinstance(models, list):
        raise AnsibleFilterError("pairserve.llm.route_keep_unknown: expected the wanted routes, GPUStack's routes and "
                                 "its models as lists")
    if not isinstance(unknown, dict):
        raise AnsibleFilterError("pairserve.llm.route_keep_unknown: expected the unknown nodes as {host: model name}")
    try:
        return routes.keep_unknown(wanted, routes_now, models, unknown, list(route_names or []), reasons or {})
    except (KeyError, TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.route_keep_unknown: %s" % err) from err


def replica_names_of(names, model_names):
    """The replica names among ``names`` of the hosts of ``model_names`` ({host: model name}; routes.owned_by)."""
    if not isinstance(model_names, dict):
        raise AnsibleFilterError("pairserve.llm.replica_names_of: expected {host: model name}")
    return routes.names_of_hosts(list(names or []), model_names)


def route_carriers(plan, info, mine):
    if not isinstance(plan, list) or not isinstance(info, dict):
        raise AnsibleFilterError("pairserve.llm.route_carriers: expected the drain plan (a list) and GPUStack's view "
                                 "(a dict)")
    try:
        return routes.carriers(plan, info, list(mine or []))
    except (KeyError, TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.route_carriers: %s" % err) from err


def route_carrier_problems(found, probes):
    """``probes``: the uri results ({url, status, msg}) of the carriers' URLs, asked from the server."""
    if not isinstance(found, dict):
        raise AnsibleFilterError("pairserve.llm.route_carrier_problems: expected route_carriers' result")
    return routes.carrier_problems(found, reach.answers(probes))


def controller_static_weights(replicas, weights, model_name, hosts):
    if not isinstance(replicas, list):
        raise AnsibleFilterError("pairserve.llm.controller_static_weights: expected the controller's replicas as a list")
    try:
        return routes.static_weights_by_replica(replicas, weights or {}, model_name, list(hosts or []))
    except (KeyError, TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.controller_static_weights: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm route filters."""

    def filters(self):
        return {"route_wanted": route_wanted, "route_drain_plan": route_drain_plan,
                "route_weight_problems": route_weight_problems,
                "controller_static_weights": controller_static_weights, "route_keep_unknown": route_keep_unknown,
                "replica_names_of": replica_names_of, "route_carriers": route_carriers,
                "route_carrier_problems": route_carrier_problems}
