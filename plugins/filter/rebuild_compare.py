# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.rebuild_compare and pairserve.llm.gpustack_gpu_rows (documented beside this file); the
rules are module_utils/rebuild.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import rebuild


def rebuild_compare(gpu_fact, recorded, view, owned_worker_ids, specs, model_path):
    if not isinstance(gpu_fact, dict):
        raise AnsibleFilterError("pairserve.llm.rebuild_compare: expected the pairserve_gpu fact (a dict), got %s"
                                 % type(gpu_fact).__name__)
    if recorded is not None and not isinstance(recorded, dict):
        raise AnsibleFilterError("pairserve.llm.rebuild_compare: the pairs record must be a dict or none, got %s"
                                 % type(recorded).__name__)
    try:
        return rebuild.compare(recorded, gpu_fact, view, list(owned_worker_ids or []), list(specs), str(model_path))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise AnsibleFilterError("pairserve.llm.rebuild_compare: %s" % err) from err


def gpustack_gpu_rows(gpus):
    try:
        return rebuild.gpustack_rows(gpus)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise AnsibleFilterError("pairserve.llm.gpustack_gpu_rows: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm node rebuild filters."""

    def filters(self):
        return {"rebuild_compare": rebuild_compare, "gpustack_gpu_rows": gpustack_gpu_rows}
