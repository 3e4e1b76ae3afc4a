# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The replica name: the one owner of the rule in the collection.

One GPUStack model per GPU pair: ``<model name>-<host>`` for the host's first pair (index 0), then
``<model name>-<host>-p<N>``. The replica role names its models by it, and everything that finds a host's
replicas again (its absent entry point, the maintenance plays, the route, the bench's measured weights, the
validation of the verify routes) reads names by it, through these functions or the filters ``replica_name`` and
``replica_name_pattern``.
"""

from __future__ import annotations

import re


def replica_name(model_name, host, pair=0):
    """The name of ``host``'s replica on its pair ``pair``."""
    pair = int(pair or 0)
    return "%s-%s%s" % (model_name, host, "" if pair == 0 else "-p%d" % pair)


def pattern(model_name, host):
    """A regular expression (Python's and Jinja's ``match``) that ``host``'s replica names match, and no other."""
    return r"^%s-%s(-p[0-9]+)?\Z" % (re.escape(str(model_name)), re.escape(str(host)))


def owned_by(name, model_name, host):
    """Whether ``name`` is one of ``host``'s replicas."""
    return re.match(pattern(model_name, host), str(name or "")) is not None


def host_of(name, model_name, hosts):
    """The one host of ``hosts`` whose replica ``name`` is; None when none is, or when several are (a host named
    like another's replica suffix: node-b and node-b-p1)."""
    found = [h for h in hosts if owned_by(name, model_name, h)]
    return found[0] if len(found) == 1 else None


def base_name(name):
    """The host's replica name on its first pair: ``name`` without its ``-p<N>``."""
    return re.sub(r"-p[0-9]+$", "", str(name))


def pair_of(name, model_name, host):
    """The pair index of ``host``'s replica ``name`` (0 for ``<model>-<host>``, N for ``-p<N>``); None when ``name``
    is not one of ``host``'s."""
    if not owned_by(name, model_name, host):
        return None
    rest = str(name)[len("%s-%s" % (model_name, host)):]
    return int(rest[2:]) if rest else 0


def conflicts(model_name, host, other_model_name, other_host):
    """Whether a replica name of ``host`` could also be one of ``other_host``'s (the same base name, or one base
    name the other's followed by -p<N>: hosts node-b and node-b-p1 with one model name), so that its replicas, its
    route targets and its maintenance could be taken for the other's."""
    mine, theirs = replica_name(model_name, host), replica_name(other_model_name, other_host)
    return owned_by(theirs, model_name, host) or owned_by(mine, other_model_name, other_host)
