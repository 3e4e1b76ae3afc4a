# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.gpustack_password_problems (documented in its .yml file); the rule is the pinned GPUStack's
own, from module_utils/gpustack_vocabulary.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import gpustack_vocabulary


def gpustack_password_problems(password, version, host):
    """[{host, variable, problem, text}] for what the admin password breaks; the password is in none of them."""
    if not isinstance(host, str) or not host:
        raise AnsibleFilterError("pairserve.llm.gpustack_password_problems: expected the host's name")
    return gpustack_vocabulary.password_check(password, version, host)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm GPUStack vocabulary filters."""

    def filters(self):
        return {"gpustack_password_problems": gpustack_password_problems}
