# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.gpu_identity_problems and pairserve.llm.gpu_order_problems (documented in
gpu_identity_problems.yml and gpu_order_problems.yml); the rules are module_utils/gpu_identity.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import gpu_identity


def gpu_identity_problems(fact, worker_gpus, host, worker=None):
    if not isinstance(fact, dict):
        raise AnsibleFilterError("pairserve.llm.gpu_identity_problems: expected the pairserve_gpu fact (a dict), "
                                 "got %s" % type(fact).__name__)
    if worker_gpus is not None and not isinstance(worker_gpus, (list, dict)):
        raise AnsibleFilterError("pairserve.llm.gpu_identity_problems: expected the worker record's gpu_devices "
                                 "(a list) or the worker record, got %s" % type(worker_gpus).__name__)
    try:
        return gpu_identity.problems(fact, worker_gpus, str(host), str(worker) if worker else None)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise AnsibleFilterError("pairserve.llm.gpu_identity_problems: %s" % err) from err


def gpu_order_problems(fact, host):
    if not isinstance(fact, dict):
        raise AnsibleFilterError("pairserve.llm.gpu_order_problems: expected the pairserve_gpu fact (a dict), got %s"
                                 % type(fact).__name__)
    try:
        return gpu_identity.order_problems(fact, str(host))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise AnsibleFilterError("pairserve.llm.gpu_order_problems: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm GPU identity filters."""

    def filters(self):
        return {"gpu_identity_problems": gpu_identity_problems, "gpu_order_problems": gpu_order_problems}
