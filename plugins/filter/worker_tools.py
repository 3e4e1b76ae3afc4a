# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.worker_tools_archive and worker_tools_problems (documented in their .yml files); the rules
are module_utils/worker_tools.py's, which the validation play checks too."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import worker_tools


def worker_tools_archive(path, inventory_dir):
    """The archive's absolute controller path (a relative one is under the inventory's directory)."""
    resolved = worker_tools.resolve(path, inventory_dir)
    if resolved is None:
        raise AnsibleFilterError("pairserve.llm.worker_tools_archive: %s is relative and the inventory's directory "
                                 "is not known: give pairserve_gpustack_tools_archive as an absolute path" % (path,))
    return resolved


def worker_tools_problems(path, inventory_dir):
    """What keeps the nodes from using the archive; empty when it is fine."""
    return worker_tools.problems(path, inventory_dir)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm worker tools filters."""

    def filters(self):
        return {"worker_tools_archive": worker_tools_archive, "worker_tools_problems": worker_tools_problems}
