# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.vllm_profile_names: the profile names a host may run."""

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_profile_names
short_description: The serving profile names a host may run, built-in and user-defined
version_added: 0.1.0
author: pairserve.llm maintainers
description:
  - Returns the built-in profile names (V(multimodal), V(text), V(lab)) followed by the names defined in
    C(pairserve_profiles), from the one list P(pairserve.llm.vllm_args#filter) renders from.
  - A role checks C(pairserve_replica_profile) against it before rendering, so a name that is neither is refused
    with the host and the variable instead of being served as another profile.
options:
  _input:
    description: The user's profiles (C(pairserve_profiles)), keyed by name; V({}) gives the built-ins only.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse a profile name that is neither built-in nor defined
  ansible.builtin.assert:
    that: pairserve_replica_profile in (pairserve_profiles | pairserve.llm.vllm_profile_names)
"""

RETURN = r"""
_value:
  description: The names, built-ins first, then the user's in alphabetical order.
  type: list
  elements: str
  sample: [multimodal, text, agents]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils.vllm_args import profile_names


def vllm_profile_names(user_profiles):
    if user_profiles is not None and not isinstance(user_profiles, dict):
        raise AnsibleFilterError("pairserve.llm.vllm_profile_names: pairserve_profiles must be a dict of profile name "
                                 "-> settings, got %s" % type(user_profiles).__name__)
    return profile_names(user_profiles)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm vLLM profile names filter."""

    def filters(self):
        return {"vllm_profile_names": vllm_profile_names}
