# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup pairserve.llm.setting: a collection variable as this host has it, else the default of the role that owns it."""

from __future__ import annotations

DOCUMENTATION = r"""
name: setting
short_description: A collection variable as the host has it, else the default of the role that owns it
version_added: 0.1.0
author: pairserve.llm maintainers (@pairserve)
description:
  - For a role or play that reads a variable another role owns (the worker's port in a drain step, the install
    prefix in an upgrade) - the value this host has (inventory, play, facts, the current role's defaults), else the
    default in the C(defaults/main.yml) of the role that defines it, templated in the current context. No copy of the
    default is kept where it is read, so it cannot drift.
  - A variable that several roles define must have the same default in each (the lookup refuses one whose defaults
    disagree, naming the roles); one that no role defines and the host does not set is an error naming it.
options:
  _terms:
    description: Variable names.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Ask this node's worker for its version, at the worker role's port unless the inventory sets another
  ansible.builtin.uri:
    url: "http://127.0.0.1:{{ lookup('pairserve.llm.setting', 'pairserve_gpustack_worker_port') }}/version"
"""

RETURN = r"""
_raw:
  description: One value per name, in order (C(lookup) gives the value itself for one name).
  type: list
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.template import trust_as_template

from ansible_collections.pairserve.llm.plugins.plugin_utils import role_defaults


def _trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        out = []
        for term in terms:
            if not isinstance(term, str):
                raise AnsibleLookupError("pairserve.llm.setting: a variable name is a string, got %s"
                                         % type(term).__name__)
            if term in variables:
                out.append(variables[term])
                continue
            try:
                # A role's defaults file is the collection's own, as trusted as the role that loads it.
                out.append(_trusted(role_defaults.owner_default(term)[1]))
            except role_defaults.RoleDefaultsError as exc:
                raise AnsibleLookupError("pairserve.llm.setting: %s" % exc) from exc
        return self._templar.template(out)
