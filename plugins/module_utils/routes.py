# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Route weights, drains and restores: the one owner of these rules in the collection.

- ``proportional``: integer weights proportional to some figure, summing to a total by the largest remainder,
  every positive figure keeping at least 1 (a weight of 0 takes a target out of GPUStack's split). The bench's
  measured weights and the split of one host's share over its replicas both use it.
- ``wanted_routes``: the routes of a serving mode from the replicas the nodes registered (pooled: one route
  weighted by ``pairserve_route_weights`` per host; split: one route per profile, equal weights). A host's weight
  is one number, split evenly over its replicas, or a list of numbers, one per pair (pair 0 first), for a host
  whose pairs serve at different speeds (``host_split``; the bench writes a list when they measured differently).
- ``drain_plan``: what a maintenance sets while one node is worked on, and what it sets back. GPUStack 2.3.0
  refuses a route whose targets mix positive and 0 weights (HTTP 422); 2.2.3 accepted it. A weight-0
  *fallback* target is accepted by both and gets no share of the split, so a node with one replica in a route
  that has no fallback of its own is drained by making that replica the route's fallback (weight 0, on 5xx of
  the others); the restore clears it. Otherwise (two replicas of the node in one route, or a fallback the user
  configured) its targets go to weight 0, which only 2.2.3 accepts.
- ``reweigh``: new weights for some targets of a route as the server has it, with that drain rule applied (a
  single weight-0 target of a route with no fallback of its own is parked as the fallback; a parked target given
  a weight again leaves the fallback). ``gpustack_route``'s ``drain`` and ``restore``, the drain plan and the
  controller all set weights through it.
- ``bounded_weights``: the controller's weights, shares clamped between a floor and a ceiling, then rounded by
  ``proportional``'s rule.
- ``carriers`` / ``carrier_problems``: a drain never removes the last healthy replica. Weights alone do not carry a
  route: GPUStack reaches each replica through the worker of its node, so before a node is drained the others'
  workers and replicas must answer where the server reaches them.
- ``target_model`` / ``named_targets``: which model a route target sends to, by name (GPUStack's targets name
  models by id): the join every reader of routes uses (the drain's view of a node, ``gpustack_route``, the reweigh).
- ``keep_unknown``: the route is changed only from what the run knows. A GPU node that failed earlier in the run
  (or was not part of it: ``--limit``) keeps the targets and weights the server has for it now; taking a node out
  of a route is an explicit act (the inventory, the drain of a day-2 play), never the side effect of a failure.
"""

from __future__ import annotations

import math

from ansible_collections.pairserve.llm.plugins.module_utils import reach, replica_names

DEFAULT_HOST_WEIGHT = 50
SPLIT_WEIGHT = 100
DRAIN_FALLBACK_CODES = ["5xx"]


def proportional(figures, total=100):
    """{name: int weight} proportional to ``figures`` (name -> number >= 0), summing to ``total``.

    Largest remainder; a positive figure never rounds to 0 (its weight is then taken from the largest one).
    Raises ValueError when every figure is 0 or missing."""
    names = list(figures)
    values = [max(0.0, float(figures[n] or 0.0)) for n in names]
    whole = sum(values)
    if whole <= 0:
        raise ValueError("no figure to derive weights from: every value is zero or missing")
    exact = [v * total / whole for v in values]
    floors = [int(x) for x in exact]
    order = sorted(range(len(names)), key=lambda i: exact[i] - floors[i], reverse=True)
    for i in order[: total - sum(floors)]:
        floors[i] += 1
    for i, value in enumerate(values):
        if value > 0 and floors[i] == 0:
            floors[i] = 1
            floors[max(range(len(floors)), key=lambda j: floors[j])] -= 1
    return dict(zip(names, floors))


def bounded_weights(shares, names, min_weight=0, max_weight=100, total=100):
    """{name: int weight} summing to ``total`` from non-negative ``shares``, each between the bounds.

    names: every target in route order; a name missing from ``shares`` (a cold target) gets 0. Every other one
    gets at least ``min_weight`` and at most ``max_weight``; bounds that cannot all hold are relaxed to 0 and
    ``total``. What clamping frees (or takes) goes to the unclamped targets in proportion, until nothing moves;
    the result is rounded by ``proportional``. No share at all (every one 0) is an even split."""
    live = [n for n in names if n in shares]
    if not live:
        raise ValueError("no warm target to route to: at least one replica must take requests")
    values = dict((n, float(shares[n])) for n in live)
    if any(v < 0 or math.isnan(v) for v in values.values()):
        raise ValueError("negative or NaN weight share in %r" % (shares,))
    lo, hi = max(0.0, float(min_weight)), min(float(total), float(max_weight))
    if lo * len(live) > total or hi * len(live) < total or lo > hi:
        lo, hi = 0.0, float(total)
    whole = sum(values.values())
    exact = dict((n, values[n] / whole * total if whole > 0 else float(total) / len(live)) for n in live)
    fixed = {}
    for _round in range(len(live) + 1):
        free = [n for n in live if n not in fixed]
        budget = total - sum(fixed.values())
        free_total = sum(exact[n] for n in free)
        scaled = dict((n, exact[n] / free_total * budget if free_total > 0 else budget / len(free)) for n in free)
        newly = dict((n, min(max(v, lo), hi)) for n, v in scaled.items() if v < lo or v > hi)
        if not newly:
            exact = dict(fixed, **scaled)
            break
        fixed.update(newly)
        if len(fixed) == len(live):
            exact = fixed
            break
    rounded = proportional(exact, total) if sum(exact.values()) > 0 else proportional(
        dict((n, 1) for n in live), total)
    return dict((n, rounded.get(n, 0)) for n in names)


def reweigh(targets, weights):
    """The route's targets after giving ``weights`` ({model: int >= 0}) to some of them, in a form GPUStack 2.2.3
    and 2.3.0 both accept where it can be.

    targets: the whole route as the server has it, [{model, weight, fallback_status_codes}]; targets not named in
    ``weights`` keep their weight. A target given a weight above 0 that was a weight-0 fallback (a drain parked
    it) leaves the fallback. Then, when exactly one target is at 0, the others carry weight and no target is the
    route's fallback, that one is parked as the fallback on ``DRAIN_FALLBACK_CODES``. Returns new dicts in the
    same order; ValueError for a model the route does not hold or a negative weight."""
    known = [t["model"] for t in targets]
    unknown = sorted(set(weights) - set(known))
    if unknown:
        raise ValueError("the route has no target for %s (its targets: %s)" % (", ".join(unknown), ", ".join(known)))
    out = []
    for target in targets:
        item = dict(target, weight=int(target.get("weight") or 0),
                    fallback_status_codes=target.get("fallback_status_codes") or None)
        if item["model"] in weights:
            weight = int(weights[item["model"]])
            if weight < 0:
                raise ValueError("weight of %s is %d: weights are 0 (drained) or more" % (item["model"], weight))
            if weight > 0 and item["weight"] == 0:
                item["fallback_status_codes"] = None
            item["weight"] = weight
        out.append(item)
    zero = [t for t in out if t["weight"] == 0]
    if (len(zero) == 1 and len(zero) < len(out) and not zero[0]["fallback_status_codes"]
            and not any(t["fallback_status_codes"] for t in out)):
        zero[0]["fallback_status_codes"] = list(DRAIN_FALLBACK_CODES)
    return out


def split_share(share, names):
    """One host's share over its replicas ``names``, equal parts summing to ``share`` (0 stays 0)."""
    names = list(names)
    if not names:
        return {}
    if int(share) <= 0:
        return dict((n, 0) for n in names)
    return proportional(dict((n, 1) for n in names), total=int(share))


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def host_split(weights, host, replicas, default=DEFAULT_HOST_WEIGHT):
    """{replica name: weight} of ``host``'s replicas from ``pairserve_route_weights`` (``weights``, by host).

    replicas: [(name, pair index)] of the host. A number is split evenly over them (``split_share``); a list gives
    each pair its own weight, pair 0 first, and must have one weight per replica (ValueError naming the host and the
    variable otherwise: the host has another number of pairs than the list was written for)."""
    value = (weights or {}).get(host, default)
    names = [name for name, _pair in sorted(replicas, key=lambda item: int(item[1] or 0))]
    if isinstance(value, (list, tuple)):
        if len(value) != len(names):
            raise ValueError("pairserve_route_weights: %s has %d pair weight(s) %s but %d pair(s) now (%s): give one "
                             "weight per pair, pair 0 first, or one number the route splits evenly"
                             % (host, len(value), list(value), len(names), ", ".join(names) or "none"))
        return dict((name, int(weight)) for name, weight in zip(names, value))
    return split_share(int(value), names)


def weight_problems(weights, hosts):
    """What is wrong with ``pairserve_route_weights`` (``weights``, by host) for a pooled route over ``hosts``.

    The one rule of the inventory check and the route role: a dict keyed by hosts of ``hosts`` whose values are
    whole numbers >= 0 (split evenly over the host's replicas) or non-empty lists of them (one per pair, pair 0
    first); a host left out gets ``DEFAULT_HOST_WEIGHT`` (so ``{}``, the route role's default, splits evenly); at
    least one weight above 0. Whether a list has one weight per pair is known once the pairs are (``host_split``).
    Returns a list of sentences, empty when the weights are fine."""
    if weights is None:
        weights = {}
    if not isinstance(weights, dict):
        return ["expected {host: weight} for the pooled route, got %r" % (weights,)]
    out = []
    for host, weight in sorted(weights.items(), key=lambda item: str(item[0])):
        if host not in hosts:
            out.append("%s is not a host of gpu_nodes (%s)" % (host, ", ".join(hosts)))
        if isinstance(weight, (list, tuple)):
            if not weight or not all(_whole(w) for w in weight):
                out.append("%s: %r is not a list of whole numbers >= 0, one per pair (pair 0 first)" % (host, weight))
        elif not _whole(weight):
            out.append("%s: %r is not a whole number >= 0 (or a list of them, one per pair)" % (host, weight))
    effective = [weights.get(h, DEFAULT_HOST_WEIGHT) for h in hosts]
    if hosts and not [w for w in effective
                      if (_whole(w) and w > 0) or (isinstance(w, (list, tuple)) and any(_whole(x) and x > 0 for x in w))]:
        out.append("no weight above 0 for %s (a host left out gets %d): the route would send nothing"
                   % (", ".join(hosts), DEFAULT_HOST_WEIGHT))
    return out


def host_share(weights, host, default=DEFAULT_HOST_WEIGHT):
    """The pooled share of ``host`` from ``pairserve_route_weights`` (hosts not named get ``default``; a list of pair
    weights counts as its sum)."""
    value = (weights or {}).get(host, default)
    return sum(int(w) for w in value) if isinstance(value, (list, tuple)) else int(value)


def replica_host(name, model_name, hosts):
    """The host of replica ``name`` by the replica role's naming (module_utils/replica_names.py); None when no host
    fits."""
    return replica_names.host_of(name, model_name, hosts)


def static_weights_by_replica(replicas, weights, model_name, hosts):
    """{replica name: weight} of a pooled route, from ``pairserve_route_weights`` (``weights``, by host).

    replicas: [{name, host (optional)}]; a replica without ``host`` belongs to the host whose name ends its model
    name (``<model_name>-<host>``, the replica role's naming). Each host's share is split over its replicas as
    ``wanted_routes`` does, so the controller's static split is the route role's. ValueError names a replica whose
    host cannot be told."""
    by_host = {}
    for replica in replicas:
        host = replica.get("host") or replica_host(replica["name"], model_name, hosts)
        if not host:
            raise ValueError("replica %s: no inventory host is named by it (%s-<host> for a host of %s); give its "
                             "host, e.g. {name: %s, host: node-b}"
                             % (replica["name"], model_name, ", ".join(hosts) or "no host", replica["name"]))
        by_host.setdefault(host, []).append((replica["name"], replica_names.pair_of(replica["name"], model_name, host)))
    out = {}
    for host, named in by_host.items():
        out.update(host_split(weights, host, named))
    return dict((r["name"], out[r["name"]]) for r in replicas)


def wanted_routes(mode, replicas_by_host, weights, route_name, split_routes=None):
    """The routes a serving mode wants.

    replicas_by_host: {host: [{name, profile, ...}]} (the ``pairserve_replicas`` fact of each GPU node, in
    inventory order). Returns [{name, targets: [{model, weight}]}]."""
    if mode == "pooled":
        targets = []
        for host, replicas in replicas_by_host.items():
            shares = host_split(weights, host, [(r["name"], r.get("pair") or 0) for r in replicas])
            targets.extend({"model": r["name"], "weight": shares[r["name"]]} for r in replicas)
        return [{"name": route_name, "targets": targets}]
    if mode != "split":
        raise ValueError("serving mode %r is neither pooled nor split" % (mode,))
    routes = []
    profiles = []
    for replicas in replicas_by_host.values():
        for replica in replicas:
            if replica["profile"] not in profiles:
                profiles.append(replica["profile"])
    for profile in profiles:
        routes.append({
            "name": (split_routes or {}).get(profile) or "%s-%s" % (route_name, profile),
            "targets": [{"model": r["name"], "weight": SPLIT_WEIGHT}
                        for replicas in replicas_by_host.values() for r in replicas if r["profile"] == profile],
        })
    return routes


def drain_plan(routes, mine, new_names, share_when_zero):
    """Plan one node's maintenance for every route in ``routes`` that holds one of its models.

    routes: [{name, targets: [{model, weight, fallback_status_codes}]}] as the server has them.
    mine: the node's model names now; new_names: its model names after the change.
    share_when_zero: {route name: share} restored when the node's targets already sum to 0 (an earlier run
    stopped while drained); routes not named get ``SPLIT_WEIGHT``. A share may be a list of pair weights (the host's
    ``pairserve_route_weights``), given to new_names in order when it has one per name.
    Returns [{name, drain, restore, drainable, fallback, drain_fallback, models}]: the targets while drained (the
    others as they are, this node's at 0 unless drained as the fallback), the targets to restore (the others as
    they are, the node's share split over new_names), whether the others carry the route meanwhile, the user's
    fallback to keep, the fallback while drained, and this node's models in the route (what a drain names)."""
    mine = set(mine)
    plan = []
    for route in routes:
        targets = route.get("targets") or []
        own = [t for t in targets if t["model"] in mine]
        others = [t for t in targets if t["model"] not in mine]
        share = sum(int(t.get("weight") or 0) for t in own)
        before = dict((t["model"], int(t.get("weight") or 0)) for t in own)
        if share == 0:
            share = (share_when_zero or {}).get(route["name"], SPLIT_WEIGHT)
        # A fallback of this node's own is a drain an earlier run left behind: not the user's fallback.
        users_fallback = [t for t in others if t.get("fallback_status_codes")]
        kept = ({"model": users_fallback[0]["model"], "status_codes": users_fallback[0]["fallback_status_codes"]}
                if users_fallback else None)
        drained = reweigh([dict(t, fallback_status_codes=None) if t in own else t for t in targets],
                          dict((t["model"], 0) for t in own))
        parked = [t for t in drained if t["weight"] == 0 and t["fallback_status_codes"]]
        drain = [{"model": t["model"], "weight": t["weight"]} for t in drained if t not in parked]
        drain_fallback = kept
        if parked and not users_fallback:
            drain_fallback = {"model": parked[0]["model"], "status_codes": parked[0]["fallback_status_codes"]}
        if share and sorted(before) == sorted(new_names) and sum(before.values()) > 0:
            # The same replicas come back: each at its own weight (a host's pairs may weigh differently).
            shares = before
        elif isinstance(share, (list, tuple)):
            shares = (dict(zip(new_names, (int(w) for w in share))) if len(share) == len(new_names)
                      else split_share(sum(int(w) for w in share), new_names))
        else:
            shares = split_share(int(share), new_names)
        restore = ([{"model": t["model"], "weight": t["weight"]} for t in others]
                   + [{"model": n, "weight": shares[n]} for n in new_names])
        plan.append({
            "name": route["name"],
            "drain": drain,
            "restore": restore,
            "drainable": any(int(t.get("weight") or 0) > 0 for t in others),
            "fallback": kept,
            "drain_fallback": drain_fallback,
            "models": [t["model"] for t in own],
        })
    return plan


def owned_by(name, model_name, host):
    """Whether replica ``name`` is one of ``host``'s (module_utils/replica_names.py)."""
    return replica_names.owned_by(name, model_name, host)


def names_of_hosts(names, model_names):
    """The replica names in ``names`` that belong to one of the hosts of ``model_names`` ({host: the
    ``pairserve_model_name`` its replicas are named after}), by ``owned_by``, in their order."""
    return [n for n in names if any(owned_by(n, m, h) for h, m in model_names.items())]


def keep_unknown(wanted, routes, models, unknown, route_names, reasons=None):
    """The wanted routes with the targets the server has now for the GPU nodes this run knows nothing of.

    wanted: ``wanted_routes`` over the nodes the run knows (their replica facts are set).
    routes, models: GPUStack's routes (each with ``route_targets``: model_id, weight) and models, as
    ``gpustack_info`` returns them. unknown: {host: model name} of the GPU nodes without replica facts in this run
    (they failed earlier, or ``--limit`` left them out); a node's replicas are ``<model name>-<host>[-p<N>]``.
    route_names: the collection's route names (both modes).
    reasons: {host: why the run knows nothing of it}, "failed earlier in this run" unless given.
    Returns {routes, kept, untouched, lines}: the wanted routes, each followed by the unknown nodes' targets of the
    route of that name as they are (weight included); ``kept`` one {host, route, model, weight} per kept target;
    ``untouched`` the collection's routes that hold an unknown node's target and are not wanted (a split route of
    a profile only that node serves): left as they are, not removed; ``lines`` one line per unknown node, naming
    what is kept (e.g. "node-b failed earlier in this run: its route target qwen-node-b is kept at 42")."""
    names_by_id = dict((m.get("id"), m.get("name")) for m in models or [])
    current = {}
    for route in routes or []:
        current[route.get("name")] = [(names_by_id.get(t.get("model_id")), int(t.get("weight") or 0))
                                      for t in route.get("route_targets") or [] if t.get("model_id") is not None]

    def owner(model):
        return next((h for h, m in unknown.items() if model and owned_by(model, m, h)), None)

    out, kept = [], []
    for route in wanted:
        targets = [dict(t) for t in route["targets"]]
        for model, weight in current.get(route["name"], []):
            host = owner(model)
            if host and model not in [t["model"] for t in targets]:
                targets.append({"model": model, "weight": weight})
                kept.append({"host": host, "route": route["name"], "model": model, "weight": weight})
        out.append({"name": route["name"], "targets": targets})
    wanted_names = [r["name"] for r in wanted]
    untouched = [name for name in route_names if name not in wanted_names
                 and any(owner(model) for model, _weight in current.get(name, []))]
    for name in untouched:
        kept.extend({"host": owner(model), "route": name, "model": model, "weight": weight}
                    for model, weight in current[name] if owner(model))
    lines = []
    for host in unknown:
        mine = [k for k in kept if k["host"] == host]
        several = len(set(k["route"] for k in kept)) > 1
        parts = ["its route target %s is kept at %d%s" % (k["model"], k["weight"],
                                                          " (route %s)" % k["route"] if several else "")
                 for k in mine]
        what = "; ".join(parts) or "GPUStack's routes hold no target of it, so none is added"
        lines.append("%s %s: %s" % (host, (reasons or {}).get(host) or "failed earlier in this run", what))
    return {"routes": out, "kept": kept, "untouched": untouched, "lines": lines}


def carriers(plan, info, mine):
    """The other targets that would carry each drainable route of ``plan`` (``drain_plan``'s) while this node is
    drained, with where the server reaches each: its worker's ``/healthz`` (GPUStack sends a route's requests through
    the worker of the replica's node) and the replica's ``/health``.

    info: GPUStack's view (``gpustack_info``: models, model_instances, workers). mine: this node's model names.
    Returns {serving, routes}: ``serving`` whether one of this node's instances runs now (a route it does not serve
    loses nothing by the drain); ``routes`` [{name, targets: [{model, node, instance, state, worker_url,
    replica_url}]}], one per drainable route, each target one of the others' instances (a model with no instance is
    listed with instance None)."""
    instances = info.get("model_instances") or []
    workers = info.get("workers") or []
    mine = set(mine)
    serving = any(i.get("model_name") in mine and i.get("state") == "running" for i in instances)
    out = []
    for route in plan:
        if not route.get("drainable"):
            continue
        targets = []
        for target in route.get("drain") or []:
            if target["model"] in mine or int(target.get("weight") or 0) <= 0:
                continue
            found = [i for i in instances if i.get("model_name") == target["model"]]
            for inst in found or [None]:
                inst = inst or {}
                worker = reach.worker_of(inst, workers)
                targets.append({
                    "model": target["model"], "node": inst.get("worker_name") or worker.get("name"),
                    "instance": inst.get("name"), "state": inst.get("state"),
                    "worker_url": reach.worker_health_url(worker), "replica_url": reach.replica_health_url(inst),
                })
        out.append({"name": route["name"], "targets": targets})
    return {"serving": serving, "routes": out}


def carrier_problems(found, answers):
    """Why the others cannot carry the routes while this node is drained: one line per route none of whose other
    targets serves, each naming its nodes first (the worker or replica that did not answer, with the address asked).

    found: ``carriers``'s result. answers: {url: (HTTP status or None, error text)} of the probes made from the
    server. Empty when every route has a target whose instance runs and whose worker and replica answer 200, or when
    this node serves nothing now."""
    if not found["serving"]:
        return []
    problems = []
    for route in found["routes"]:
        why = []
        for target in route["targets"]:
            node = target["node"] or "no node"
            if not target["instance"]:
                why.append("[%s] %s has no instance" % (node, target["model"]))
                continue
            if target["state"] != "running":
                why.append("[%s] instance %s is %s" % (node, target["instance"], target["state"] or "in no state"))
                continue
            failed = None
            for kind, url in (("worker", target["worker_url"]), ("replica", target["replica_url"])):
                status, error = (answers or {}).get(url, (None, "not asked"))
                if url and status != 200:
                    failed = "[%s] the %s at %s does not answer (%s)" % (
                        node, "worker" if kind == "worker" else "replica %s" % target["instance"],
                        url.rsplit("/", 1)[0], error or "HTTP %s" % status)
                    break
            if failed:
                why.append(failed + "; GPUStack lists %s as running" % target["instance"])
            else:
                why = None
                break
        if why is not None:
            problems.append("route %s: no other target can serve it while this node is drained: %s"
                            % (route["name"], "; ".join(why) or "it has no other target"))
    return problems


# -- route targets by model name ----------------------------------------------------------------------------------

def target_model(target, names_by_id):
    """The model a route target sends to, by name: the cluster model's name, ``provider:<id>`` for an external
    provider's target, ``model-id:<id>`` for a model id GPUStack does not have (a target left behind)."""
    model_id = target.get("model_id")
    if model_id is None:
        return "provider:%s" % target.get("provider_id")
    return names_by_id.get(model_id, "model-id:%s" % model_id)


def named_targets(targets, names_by_id):
    """A route's model targets (external providers' left out), each {id, model, weight, fallback_status_codes}
    with ``model`` by name (``target_model``), in the route's order."""
    return [{"id": t.get("id"), "model": target_model(t, names_by_id), "weight": t.get("weight") or 0,
             "fallback_status_codes": t.get("fallback_status_codes")}
            for t in targets or [] if t.get("model_id") is not None]
