# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.cuda_driver_floor (documented beside this file); the table is module_utils/cuda.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import cuda


def cuda_driver_floor(image, override=""):
    try:
        return cuda.driver_floor(image, override or "")
    except cuda.CudaError as err:
        raise AnsibleFilterError("pairserve.llm.cuda_driver_floor: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm driver floor filter."""

    def filters(self):
        return {"cuda_driver_floor": cuda_driver_floor}
