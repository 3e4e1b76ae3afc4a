# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bench's measured route weights as the inventory keeps them.

The bench measures weights per replica (``<pairserve_model_name>-<host>``, ``-p<N>`` for a host's further pairs);
the inventory's ``pairserve_route_weights`` is per host and split again over the host's replicas by the route role
(module_utils/routes.py). So a host's weight is the sum of its replicas' weights, or, where a host's pairs measured
differently (two pairs of other cards), the list of its pairs' weights, pair 0 first; the measured weights outlive
the next ``site.yml`` only when they are written to the inventory (``pairserve_bench_weights_file``, written with
the module pairserve.llm.vars_file_entry). Used by the bench role (filters bench_host_weights,
bench_weights_file) and by the inventory check.
"""

from __future__ import annotations

import os

from ansible_collections.pairserve.llm.plugins.module_utils import replica_names, routes

VARIABLE = "pairserve_route_weights"
FILE_VARIABLE = "pairserve_bench_weights_file"
SUFFIXES = (".yml", ".yaml")


def replica_host(name, hosts, model_name):
    """The host in ``hosts`` whose replica ``name`` is (module_utils/replica_names.py), or None."""
    return replica_names.host_of(name, model_name, list(hosts))


def host_weights(replica_weights, hosts, model_name):
    """{host: the sum of its replicas' weights} in the order of ``hosts``.

    Raises ValueError when a replica belongs to no host of ``hosts`` or a host has no measured replica: the
    inventory would then give it the route role's default instead of a measured weight."""
    hosts = list(hosts)
    out = dict((h, 0) for h in hosts)
    seen = set()
    stray = []
    for name, weight in (replica_weights or {}).items():
        host = replica_host(name, hosts, model_name)
        if host is None:
            stray.append(str(name))
            continue
        out[host] += int(weight)
        seen.add(host)
    if stray:
        raise ValueError("replica(s) %s are not named %s-<host>[-p<N>] for a host of gpu_nodes (%s)"
                         % (", ".join(stray), model_name, ", ".join(hosts) or "none"))
    missing = [h for h in hosts if h not in seen]
    if missing:
        raise ValueError("no replica of %s was measured, so the inventory would give it the route role's default "
                         "instead of a measured weight" % ", ".join(missing))
    return out


def weights_yaml(weights):
    """The exact inventory YAML for ``weights``: ``pairserve_route_weights:`` then one ``  host: weight`` line each
    (``  host: [w0, w1]`` for a host weighed per pair)."""
    def value(weight):
        if isinstance(weight, (list, tuple)):
            return "[%s]" % ", ".join("%d" % int(w) for w in weight)
        return "%d" % int(weight)
    return "%s:\n%s" % (VARIABLE, "".join("  %s: %s\n" % (host, value(weight)) for host, weight in weights.items()))


def weights_file(value, inventory_dir=None):
    """(absolute path, problem) for ``pairserve_bench_weights_file``: ("", None) when not set.

    It must be a .yml/.yaml path, absolute or relative to the inventory's directory, that is not a directory and
    whose directory exists (the file itself is created when absent)."""
    if value is None or value == "":
        return "", None
    if not isinstance(value, str):
        return "", "%r is not a path" % (value,)
    if not value.lower().endswith(SUFFIXES):
        return "", ("%s is not a .yml or .yaml file: give the inventory vars file the weights go to, e.g. "
                    "group_vars/all/route_weights.yml" % value)
    if os.path.isabs(value):
        path = value
    elif inventory_dir:
        path = os.path.join(str(inventory_dir), value)
    else:
        return "", ("%s is relative, but the inventory has no directory to resolve it from: give an absolute path"
                    % value)
    path = os.path.normpath(path)
    if os.path.isdir(path):
        return path, "%s is a directory: name a .yml file in it" % path
    if not os.path.isdir(os.path.dirname(path)):
        return path, ("%s: its directory does not exist (is group_vars/all a file rather than a directory?)"
                      % path)
    if os.path.exists(path) and not os.path.isfile(path):
        return path, "%s is not a regular file" % path
    return path, None


def keep_plan(replica_weights, hosts, model_name, path, inventory_weights, route):
    """What the report says about keeping the measured weights.

    {host_weights, problem, yaml, file, temporary, inventory_weights, route, uneven}: ``host_weights`` the per-host
    weights, a list of pair weights for a host whose pairs measured differently (None when ``problem``),
    ``temporary`` true when no file is set."""
    plan = {"file": path or "", "temporary": not path, "route": route, "host_weights": None, "problem": None,
            "yaml": "", "inventory_weights": dict(inventory_weights or {}), "uneven": []}
    try:
        plan["host_weights"] = host_weights(replica_weights, hosts, model_name)
    except ValueError as err:
        plan["problem"] = str(err)
        return plan
    for host, share in list(plan["host_weights"].items()):
        # The route role splits a host's number evenly over its replicas: pairs that measured differently are kept
        # as a list, one weight per pair, when every pair from 0 on was measured; otherwise say what the split does.
        names = sorted((n for n in replica_weights if replica_host(n, [host], model_name)),
                       key=lambda n: replica_names.pair_of(n, model_name, host))
        even = routes.split_share(share, names)
        if all(even[n] == int(replica_weights[n]) for n in names):
            continue
        if [replica_names.pair_of(n, model_name, host) for n in names] == list(range(len(names))):
            plan["host_weights"][host] = [int(replica_weights[n]) for n in names]
            continue
        plan["uneven"].append("%s's replicas measured %s, but not every pair of it from pair 0 on was measured, so "
                              "the inventory keeps one weight for it: the route role splits its %d evenly (%s)" % (
                                  host, ", ".join("%s %s" % (n, replica_weights[n]) for n in names), share,
                                  ", ".join("%s %d" % (n, even[n]) for n in names)))
    plan["yaml"] = weights_yaml(plan["host_weights"])
    return plan


def _inline(weights):
    return "{%s}" % ", ".join("%s: %s" % item for item in weights.items()) if weights else "{}"


def keep_lines(plan, applied, written=None, default_share=50):
    """Sentences for the report and the play's last message: whether the weights outlive the next site.yml.

    applied: the bench applied them to the route in this run; written: the file write's result (changed,
    action) when a file was set, None in check mode or when not written."""
    return _keep_lines(plan, applied, written, default_share) + ["Note: %s." % u for u in plan.get("uneven") or []]


def _keep_lines(plan, applied, written, default_share):
    inventory = _inline(plan.get("inventory_weights") or {})
    if plan.get("file"):
        if written is None:
            return ["A run writes %s to %s: the next site.yml keeps them." % (VARIABLE, plan["file"])]
        if written.get("changed"):
            lines = ["Kept: %s written to %s (%s); the next site.yml applies the same weights."
                     % (VARIABLE, plan["file"], written.get("action") or "changed")]
        else:
            lines = ["Kept: %s in %s already holds these weights; the next site.yml applies the same weights."
                     % (VARIABLE, plan["file"])]
        effective = plan.get("inventory_weights") or {}
        previous = written.get("previous") if written.get("previous_present") else None
        if effective and effective != previous:
            # The inventory read at the start of the run did not take its value from this file.
            held = _inline(previous) if previous else "nothing"
            lines.append("Check the precedence: this run's inventory set %s = %s, which is not what %s held (%s), so "
                         "another source sets it (host_vars, another group_vars file, -e) and may still win over "
                         "this file; remove it there." % (VARIABLE, inventory, plan["file"], held))
        return lines
    if applied:
        lines = ["TEMPORARY: these weights were applied to route %s, but the next site.yml sets it back from the "
                 "inventory's %s = %s (a host not named gets %d)."
                 % (plan.get("route"), VARIABLE, inventory, default_share)]
    else:
        lines = ["Not kept anywhere: the inventory's %s = %s stays what site.yml applies." % (VARIABLE, inventory)]
    if plan.get("problem"):
        lines.append("They cannot be written as per-host weights: %s." % plan["problem"])
        return lines
    lines.append("To keep them, set %s (an inventory vars file, e.g. group_vars/all/route_weights.yml) and run "
                 "the bench again, or paste into the inventory's group_vars/all:" % FILE_VARIABLE)
    return lines


def kept(plan, applied, written=None):
    """{lines, yaml, temporary}: keep_lines, the YAML to paste (empty when there is nothing to paste: a file is
    set, or the weights cannot be per host), and whether the measured weights end with the next site.yml."""
    paste = not plan.get("file") and not plan.get("problem")
    return {"lines": keep_lines(plan, applied, written), "yaml": plan.get("yaml", "") if paste else "",
            "temporary": not plan.get("file"), "file": plan.get("file") or "",
            "host_weights": plan.get("host_weights")}
