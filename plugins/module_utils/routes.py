# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Route weights, drains and restores: the one owner of these rules in the collection.

- ``proportional``: integer weights proportional to some figure, summing to a total by the largest remainder,
  every positive figure keeping at least 1 (a weight of 0 takes a target out of GPUStack's split). The bench's
  measured weights and the split of one host's share over its replicas both use it.
- ``wanted_routes``: the routes of a serving mode from the replicas the nodes registered (pooled: one route
  weighted by ``pairserve_route_weights`` per host; split: one route per profile, equal weights).
- ``drain_plan``: what a maintenance sets while one node is worked on, and what it sets back. GPUStack 2.3.0
  refuses a route whose targets mix positive and 0 weights (HTTP 422); 2.2.3 accepted it. A weight-0
  *fallback* target is accepted by both and gets no share of the split, so a node with one replica in a route
  that has no fallback of its own is drained by making that replica the route's fallback (weight 0, on 5xx of
  the others); the restore clears it. Otherwise (two replicas of the node in one route, or a fallback the user
  configured) its targets go to weight 0, which only 2.2.3 accepts.
"""

from __future__ import annotations

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


def split_share(share, names):
    """One host's share over its replicas ``names``, equal parts summing to ``share`` (0 stays 0)."""
    names = list(names)
    if not names:
        return {}
    if int(share) <= 0:
        return dict((n, 0) for n in names)
    return proportional(dict((n, 1) for n in names), total=int(share))


def host_share(weights, host, default=DEFAULT_HOST_WEIGHT):
    """The pooled share of ``host`` from ``pairserve_route_weights`` (hosts not named get ``default``)."""
    return int((weights or {}).get(host, default))


def wanted_routes(mode, replicas_by_host, weights, route_name, split_routes=None):
    """The routes a serving mode wants.

    replicas_by_host: {host: [{name, profile, ...}]} (the ``pairserve_replicas`` fact of each GPU node, in
    inventory order). Returns [{name, targets: [{model, weight}]}]."""
    if mode == "pooled":
        targets = []
        for host, replicas in replicas_by_host.items():
            shares = split_share(host_share(weights, host), [r["name"] for r in replicas])
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
    stopped while drained); routes not named get ``SPLIT_WEIGHT``.
    Returns [{name, drain, restore, drainable, fallback, drain_fallback}]: the targets while drained (the
    others as they are, this node's at 0 unless drained as the fallback), the targets to restore (the others as
    they are, the node's share split over new_names), whether the others carry the route meanwhile, the user's
    fallback to keep, and the fallback while drained."""
    mine = set(mine)
    plan = []
    for route in routes:
        targets = route.get("targets") or []
        own = [t for t in targets if t["model"] in mine]
        others = [t for t in targets if t["model"] not in mine]
        share = sum(int(t.get("weight") or 0) for t in own)
        if share == 0:
            share = int((share_when_zero or {}).get(route["name"], SPLIT_WEIGHT))
        # A fallback of this node's own is a drain an earlier run left behind: not the user's fallback.
        users_fallback = [t for t in others if t.get("fallback_status_codes")]
        kept = ({"model": users_fallback[0]["model"], "status_codes": users_fallback[0]["fallback_status_codes"]}
                if users_fallback else None)
        as_fallback = len(own) == 1 and not users_fallback
        drain = [{"model": t["model"], "weight": t["weight"]} for t in others]
        if not as_fallback:
            drain += [{"model": t["model"], "weight": 0} for t in own]
        shares = split_share(share, new_names)
        restore = ([{"model": t["model"], "weight": t["weight"]} for t in others]
                   + [{"model": n, "weight": shares[n]} for n in new_names])
        plan.append({
            "name": route["name"],
            "drain": drain,
            "restore": restore,
            "drainable": any(int(t.get("weight") or 0) > 0 for t in others),
            "fallback": kept,
            "drain_fallback": ({"model": own[0]["model"], "status_codes": list(DRAIN_FALLBACK_CODES)}
                               if as_fallback else kept),
        })
    return plan
