# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.role_defaults (documented in role_defaults.yml); plugin_utils/role_defaults.py reads."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.plugin_utils import role_defaults as _role_defaults


def role_defaults(role, names=None):
    try:
        return _role_defaults.role_defaults(role, names)
    except _role_defaults.RoleDefaultsError as exc:
        raise AnsibleFilterError("pairserve.llm.role_defaults: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"role_defaults": role_defaults}
