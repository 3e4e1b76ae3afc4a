# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the bench play's A/B arms: validate them, build an arm's profile, build and render the report."""

from __future__ import annotations

DOCUMENTATION = r"""
name: bench_arms_check
short_description: Validate the bench play's A/B arms before anything is measured or changed
version_added: 0.1.0
author: pairserve.llm maintainers
description:
- Checks every arm of C(pairserve_bench_arms) and returns them with C(kind) added (V(endpoint) or V(node)).
- An arm is C({name, targets}) (endpoints already serving it) or C({name, node, replica}) (the bench play boots it on
  C(node), an inventory host of group C(gpu_nodes), through GPUStack, with C(replica) merged over the node's profile).
- C(replica) keys are the profile keys of the vLLM rendering (for example C(max_num_seqs), C(kv_cache_dtype),
  C(speculative), C(extra_args)) and C(env).
- Fails listing every problem at once, each with what to write instead.
- The same module also provides C(bench_arm_profile) (the arm's profile over the node's), C(bench_summary) (the
  report's data) and C(bench_summary_markdown) (the report).
positional: nodes
options:
  _input:
    description: The arms.
    type: list
    elements: dict
    required: true
  nodes:
    description: The inventory hosts an arm may boot on (group C(gpu_nodes)).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Validate the arms
  ansible.builtin.set_fact:
    arms: "{{ pairserve_bench_arms | pairserve.llm.bench_arms_check(groups['gpu_nodes']) }}"

- name: The profile node-b's replica renders for an arm
  ansible.builtin.debug:
    msg: "{{ 'lab' | pairserve.llm.bench_arm_profile(pairserve_profiles | default({}), {'max_num_seqs': 2}) }}"
"""

RETURN = r"""
_value:
  description: The arms, each with C(kind) (V(endpoint) or V(node)).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import bench


def bench_arms_check(arms, nodes=None):
    """Arms -> the same arms with kind; AnsibleFilterError naming every problem."""
    try:
        return bench.check_arms(arms, nodes or [])
    except bench.ArmError as exc:
        raise AnsibleFilterError("pairserve.llm.bench_arms_check: %s" % exc) from exc


def bench_arm_profile(profile_name, profiles=None, replica=None):
    """Node profile name, pairserve_profiles, arm overrides -> the profile dict the arm's replica renders."""
    return bench.arm_profile(profile_name, profiles or {}, replica or {})


def bench_summary(baseline, arms, outcomes, route=None, weights_applied=None, weights_note=""):
    """Baseline results.json, checked arms, their outcomes -> the report data (results.json of the report)."""
    return bench.summarize(baseline or {}, arms or [], outcomes or [], route, weights_applied, weights_note)


def bench_summary_markdown(summary):
    """Report data -> report.md."""
    return bench.render_summary_markdown(summary)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm bench A/B arm filters."""

    def filters(self):
        return {"bench_arms_check": bench_arms_check, "bench_arm_profile": bench_arm_profile,
                "bench_summary": bench_summary, "bench_summary_markdown": bench_summary_markdown}
