# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup pairserve.llm.gpustack_constraints: the GPUStack releases the collection pins, and their node Pythons."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpustack_constraints
short_description: The GPUStack releases the collection has constraints files for, with their node Pythons
version_added: 0.1.0
author: pairserve.llm maintainers (@pairserve)
description:
  - Reads the constraints files of role P(pairserve.llm.gpustack_install#role) - one holds file per GPUStack release
    and, per node Python, the release's pins (written by C(tools/resolve_constraints.py)) - and returns one dict
    mapping each release to the Python minors it has pins for, in version order.
  - The validation play takes the releases from it, the preflight role the Pythons of the pinned release.
options: {}
"""

EXAMPLES = r"""
- name: Refuse a GPUStack version the collection has no constraints for
  ansible.builtin.assert:
    that: pairserve_gpustack_version in lookup('pairserve.llm.gpustack_constraints')
"""

RETURN = r"""
_raw:
  description: One dict, each release mapped to its list of Python minors.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.pairserve.llm.plugins.plugin_utils import constraints


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError("pairserve.llm.gpustack_constraints: takes no terms (got %r)" % (terms,))
        return [constraints.releases()]
