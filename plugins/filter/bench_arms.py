# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the bench play's A/B arms: validate them, build an arm's profile, build and render the report.

Documented per filter beside this file (bench_arms_check.yml, bench_arm_profile.yml, bench_summary.yml,
bench_summary_markdown.yml).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils._bench_arms import ArmError, arm_profile, check_arms
from ansible_collections.pairserve.llm.plugins.module_utils._bench_report import render_summary_markdown, summarize


def bench_arms_check(arms, nodes=None):
    """Arms -> the same arms with kind; AnsibleFilterError naming every problem."""
    try:
        return check_arms(arms, nodes or [])
    except ArmError as exc:
        raise AnsibleFilterError("pairserve.llm.bench_arms_check: %s" % exc) from exc


def bench_arm_profile(profile_name, profiles=None, replica=None):
    """Node profile name, pairserve_profiles, arm overrides -> the profile dict the arm's replica renders."""
    return arm_profile(profile_name, profiles or {}, replica or {})


def bench_summary(baseline, arms, outcomes, route=None, weights_applied=None, weights_note="", weights_kept=None):
    """Baseline results.json, checked arms, their outcomes -> the report data (results.json of the report)."""
    return summarize(baseline or {}, arms or [], outcomes or [], route, weights_applied, weights_note,
                     weights_kept)


def bench_summary_markdown(summary):
    """Report data -> report.md."""
    return render_summary_markdown(summary)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm bench A/B arm filters."""

    def filters(self):
        return {"bench_arms_check": bench_arms_check, "bench_arm_profile": bench_arm_profile,
                "bench_summary": bench_summary, "bench_summary_markdown": bench_summary_markdown}
