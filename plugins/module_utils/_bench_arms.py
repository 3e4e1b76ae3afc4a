# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the bench play's A/B arms, validated before anything is measured or changed, and the profile an
arm's replica renders.
"""

from __future__ import annotations

import re

from ansible_collections.pairserve.llm.plugins.module_utils import vllm_args


ARM_NAME = re.compile(r"^[\w.-]+\Z")
ARM_KEYS = ("name", "targets", "node", "replica")
# What an arm booted through GPUStack may change on its node's replica: the profile keys of vllm_args (merged
# over the node's own profile, so the arm differs from the baseline only where it says) and the replica's
# environment. name/base choose which profile is merged over, ab_arm is set by the play: not an arm's business.
ARM_REPLICA_KEYS = tuple(k for k in vllm_args.PROFILE_KEYS if k not in ("name", "base", "ab_arm")) + ("env",)
ARM_TARGET_KEYS = ("name", "base_url", "model")


class ArmError(ValueError):
    """pairserve_bench_arms is malformed; the message lists every problem and what to write instead."""


def check_arms(arms, nodes=(), var="pairserve_bench_arms"):
    """Validate the A/B arms before anything is measured or changed; return them normalised.

    Two forms: ``{name, targets: [...]}`` (endpoints someone else started) and ``{name, node, replica: {...}}``
    (the play boots the arm on ``node`` through GPUStack with ``replica`` merged over that node's profile).
    Each returned arm carries ``kind`` (``endpoint`` or ``node``). Raises ArmError naming every problem."""
    problems = []
    if arms is None:
        arms = []
    if not isinstance(arms, list):
        raise ArmError("%s must be a list of arms, got %s" % (var, type(arms).__name__))
    nodes = list(nodes or [])
    seen = set()
    out = []
    for pos, arm in enumerate(arms):
        where = "%s[%d]" % (var, pos)
        if not isinstance(arm, dict):
            problems.append("%s: an arm is a dict ({name, node, replica} or {name, targets}), got %r" % (where, arm))
            continue
        name = arm.get("name")
        if isinstance(name, str) and name:
            where = "%s[%d] (%s)" % (var, pos, name)
        unknown = sorted(set(arm) - set(ARM_KEYS))
        if unknown:
            problems.append("%s: unknown key(s) %s; an arm has %s" % (where, ", ".join(unknown), ", ".join(ARM_KEYS)))
        if not isinstance(name, str) or not ARM_NAME.match(name):
            problems.append("%s: name must be letters, digits, '.', '_' or '-' (it names the report directory), "
                            "got %r" % (where, name))
        elif name == "baseline":
            problems.append("%s: 'baseline' is the run every arm is compared with; give the arm another name" % where)
        elif name in seen:
            problems.append("%s: the name is used by an earlier arm; arm names must be unique" % where)
        else:
            seen.add(name)
        has_targets, has_node = "targets" in arm, ("node" in arm or "replica" in arm)
        if has_targets == has_node:
            problems.append("%s: give either targets (endpoints already serving the arm) or node and replica (the "
                            "play boots the arm on that node through GPUStack), not %s"
                            % (where, "both" if has_targets else "neither"))
            continue
        if has_targets:
            targets = arm["targets"]
            if not isinstance(targets, list) or not targets:
                problems.append("%s: targets must be a non-empty list of {name, base_url, model}" % where)
                continue
            for tpos, target in enumerate(targets):
                missing = [k for k in ARM_TARGET_KEYS if not isinstance(target, dict) or not target.get(k)]
                if missing:
                    problems.append("%s: targets[%d] lacks %s" % (where, tpos, ", ".join(missing)))
            out.append(dict(arm, kind="endpoint"))
            continue
        node, replica = arm.get("node"), arm.get("replica")
        if not isinstance(node, str) or node not in nodes:
            problems.append("%s: node %r is not a host of group gpu_nodes (%s); name the inventory host whose "
                            "replica boots this arm" % (where, node, ", ".join(nodes) or "the group is empty"))
        if not isinstance(replica, dict) or not replica:
            problems.append("%s: replica must be a non-empty dict of overrides of the node's replica (e.g. "
                            "{max_num_seqs: 4}, {kv_cache_dtype: fp8}, {speculative: {method: mtp, "
                            "num_speculative_tokens: 2}}); an arm that changes nothing measures the baseline again"
                            % where)
            continue
        bad = sorted(set(replica) - set(ARM_REPLICA_KEYS))
        if bad:
            problems.append("%s: replica key(s) %s cannot be overridden by an arm; the keys are the profile keys of "
                            "docs/vllm-arguments.md and env: %s" % (where, ", ".join(bad), ", ".join(ARM_REPLICA_KEYS)))
        env = replica.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                                and not isinstance(v, bool) for k, v in env.items()):
            problems.append("%s: replica.env must map variable names to strings or numbers, got %r" % (where, env))
        extra = replica.get("extra_args", [])
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            problems.append("%s: replica.extra_args must be a list of strings such as '--max-num-seqs=2', got %r"
                            % (where, extra))
        out.append(dict(arm, kind="node"))
    if problems:
        raise ArmError("%d problem(s) in %s, nothing was measured or changed:\n- %s"
                       % (len(problems), var, "\n- ".join(problems)))
    return out


def arm_profile(profile_name, profiles, replica):
    """The profile an arm's replica renders: the node's profile (``profile_name`` with its entry of
    ``profiles``, pairserve_profiles) with the arm's overrides merged over it, ``ab_arm`` set (MTP is allowed
    only in an arm). ``env`` is not a profile key; the play merges it over the node's replica env."""
    base = dict((profiles or {}).get(profile_name) or {})
    base.update({k: v for k, v in (replica or {}).items() if k != "env"})
    base["ab_arm"] = True
    return base
