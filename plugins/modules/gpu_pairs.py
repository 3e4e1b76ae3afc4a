#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module pairserve.llm.gpu_pairs: NVML inventory and tensor-parallel pairing of a GPU node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_pairs
short_description: Inventory the NVIDIA GPUs of a node and group them into tensor-parallel pairs
version_added: 0.1.0
description:
  - Reads every GPU through NVML (nvidia-ml-py) on the target, that is UUID, PCI bus id, name, memory,
    compute capability, architecture, power draw and limit, persistence mode, maximum PCIe generation and
    width, active NVLink links, and between every two GPUs the P2P status and PCIe topology.
  - Groups the GPUs into tensor-parallel groups of O(group_size) (the TP=2 replicas of the collection);
    only GPUs of one model and memory size unless O(allow_mixed), the best-linked GPUs first
    (NVLink, then P2P, then the nearest common PCIe ancestor), ties broken by PCI bus id.
  - Each pair carries a C(CUDA_VISIBLE_DEVICES) value made of UUIDs, because CUDA numbers devices
    fastest-first by default and a mixed host would otherwise put a replica on the wrong cards.
  - Warns, without failing, when a pair's two cards hang off different NUMA nodes or CPU sockets with no direct
    peer-to-peer path (NVLink or PCIe P2P), saying what that costs the TP=2 replica.
  - Returns the fact C(pairserve_gpu). Fails with what to do when there is no driver, a GPU is lost,
    the driver is too old for the architecture, or the number of pairs differs from O(expected_pairs).
  - When the environment variable E(PAIRSERVE_NVML_REPLAY) names a recording written by
    C(tools/record_nvml.py), the real nvidia-ml-py runs over that recording instead of the driver
    and every result says C(source=replay:<file>). Pass it with the task's C(environment) keyword.
author:
  - pairserve.llm maintainers (@pairserve)
requirements:
  - nvidia-ml-py (the C(pynvml) module) on the target, e.g. in the venv of the pairserve.llm.node_venv role.
  - An NVIDIA driver on the target, unless E(PAIRSERVE_NVML_REPLAY) is set.
extends_documentation_fragment:
  - pairserve.llm.attributes
  - pairserve.llm.attributes.INFO_MODULE
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
    details:
      - Sets the fact C(pairserve_gpu).
options:
  group_size:
    description:
      - GPUs per tensor-parallel group (the C(--tensor-parallel-size) of one replica).
    type: int
    default: 2
  allow_mixed:
    description:
      - Also group GPUs of different models or memory sizes. The smaller card then sets the memory of the
        group and the slower one its pace; the FP4 path follows the lowest compute capability.
    type: bool
    default: false
  exclude:
    description:
      - GPUs to leave out, by UUID (C(GPU-...)) or PCI bus id (C(0000:01:00.0) or C(00000000:01:00.0)).
      - An entry that matches no GPU of the host fails the task, as it is most likely a typo.
    type: list
    elements: str
    default: []
  expected_pairs:
    description:
      - Fail when the host forms a different number of groups. This is the hardware-swap guard; the message
        lists the GPUs found and why any were not grouped.
    type: int
  min_driver:
    description:
      - Minimum driver version per architecture (C(blackwell), C(hopper), C(ada), C(ampere), ...), merged
        over the built-in table C(blackwell=570), C(hopper=525), C(ada=525), C(ampere=450), C(turing=418),
        C(volta=384). Set an architecture to C("0") to skip its check.
    type: dict
notes:
  - The module only reads; it runs the same in check mode.
  - C(gpustack_gpu_indexes) are the indexes GPUStack's worker reports, the NVML indexes. gpustack-runtime 0.2.1
    numbers GPUs that way with C(GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0), which the collection sets in
    every worker's environment (its default would number them by minor number, C(/dev/nvidia<N>), kept here
    as C(minor_number) for information).
  - C(cuda_ordinals) are where CUDA inside a replica reads those indexes. GPUStack starts replicas privileged,
    with every GPU of the host and C(CUDA_VISIBLE_DEVICES) set to the GPUStack indexes, and the replica has
    C(CUDA_DEVICE_ORDER=PCI_BUS_ID), so an index means the GPU of that rank in PCI bus-id order among all the
    host's GPUs (a MIG-enabled card takes no rank). A pair runs on its own cards only where both lists are
    equal; the preflight role refuses the host otherwise (filter P(pairserve.llm.gpu_order_problems#filter)).
    The module itself reports the lists and does not fail on them.
seealso:
  - name: docs/gpu-detection.md
    description: What the module reports, how pairing works, and how to record a host.
    link: https://github.com/pairserve/llm/blob/main/docs/gpu-detection.md
"""

EXAMPLES = r"""
- name: Find the GPU pairs of this node
  pairserve.llm.gpu_pairs:
  vars:
    ansible_python_interpreter: "{{ pairserve_node_python }}"

- name: Guard against a swapped card, leave one GPU to the desktop
  pairserve.llm.gpu_pairs:
    expected_pairs: 1
    exclude:
      - "0000:03:00.0"

- name: Replay a recorded host (no GPU needed)
  pairserve.llm.gpu_pairs:
  environment:
    PAIRSERVE_NVML_REPLAY: "{{ playbook_dir }}/../tests/fixtures/nvml/node-a-2x5080.json"

- name: Use the first pair
  ansible.builtin.debug:
    msg: "CUDA_VISIBLE_DEVICES={{ pairserve_gpu.pairs[0].cuda_visible_devices }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to the host.
  returned: success
  type: dict
  contains:
    pairserve_gpu:
      description: The GPU inventory and its grouping.
      returned: success
      type: dict
      contains:
        source:
          description: C(nvml) for real hardware, C(replay:<file>) for a recording.
          type: str
          sample: nvml
        driver_version:
          description: NVIDIA driver version.
          type: str
          sample: "580.95.05"
        cuda_driver_version:
          description: Highest CUDA version the driver supports, C(major.minor).
          type: str
          sample: "13.0"
        nvml_version:
          description: NVML library version.
          type: str
          sample: "13.580.95.05"
        group_size:
          description: The O(group_size) used.
          type: int
          sample: 2
        gpus:
          description:
            - Every GPU in NVML order with C(index), C(uuid), C(name), C(bus_id), C(minor_number),
              C(mig_enabled), C(memory_total_bytes),
              C(memory_total_mib), C(compute_capability), C(architecture), C(power_draw_w), C(power_limit_w),
              C(persistence_mode), C(pcie_max_gen), C(pcie_max_width), C(nvlink_active_links),
              C(numa_node) (null where NVML does not support it).
          type: list
          elements: dict
        pairs:
          description:
            - The groups, ordered by PCI bus id, each with C(index), C(uuids), C(bus_ids), C(nvml_indices),
              C(cuda_visible_devices) (comma-joined UUIDs), C(gpustack_gpu_indexes) (for GPUStack's
              C(<worker>:cuda:<index>) selector, the NVML indexes), C(cuda_ordinals) (each GPU's rank in PCI
              bus-id order among all the host's GPUs, its CUDA ordinal in a privileged replica; null where
              the order cannot be told), C(name), C(mixed), C(memory_total_mib) (per GPU, the
              smallest), C(compute_capability) and C(architecture) (of the weakest card), C(fp4_path)
              (C(native), C(marlin) or C(unsupported)), C(link) (C(nvlink), C(p2p) or C(pcie)), C(p2p_read),
              C(topology), C(idle_power_w) (summed power draw now), C(numa_nodes) (each card's NUMA node, null
              where NVML does not say), C(spans_sockets) (true when the cards hang off different NUMA nodes or the
              PCIe path crosses the CPU sockets, null when NVML cannot tell) and C(topology_warning) (set when the
              pair spans sockets without NVLink or PCIe P2P, the TP=2 all-reduce then crossing the sockets).
          type: list
          elements: dict
          sample:
            - index: 0
              uuids: [GPU-5080a000-0000-4000-8000-000000000001, GPU-5080a000-0000-4000-8000-000000000002]
              bus_ids: ["00000000:01:00.0", "00000000:02:00.0"]
              nvml_indices: [0, 1]
              cuda_visible_devices: GPU-5080a000-0000-4000-8000-000000000001,GPU-5080a000-0000-4000-8000-000000000002
              gpustack_gpu_indexes: [0, 1]
              cuda_ordinals: [0, 1]
              name: NVIDIA GeForce RTX 5080
              mixed: false
              memory_total_mib: 16303
              compute_capability: "12.0"
              architecture: blackwell
              fp4_path: native
              link: pcie
              p2p_read: gpu_not_supported
              topology: host_bridge
              idle_power_w: 21.6
        leftover:
          description:
            - GPUs in no group, each with C(uuid), C(bus_id), C(name), C(reason) and C(rule), the rule that left it
              out (C(exclude), C(mig), C(model) for one model per pair, C(partner) for an odd one out).
          type: list
          elements: dict
        warnings:
          description: The pairs' topology warnings (also given as Ansible warnings); a warning does not fail the module.
          type: list
          elements: str
        no_pairs_reason:
          description:
            - When the host has no group at all, which rule removed which GPU (null when it has one); the preflight
              role fails with it.
          type: str
        links:
          description:
            - One entry per two GPUs with C(uuids), C(bus_ids), C(nvml_indices), C(link), C(topology),
              C(topology_level) and C(p2p) (status per capability C(read), C(write), C(nvlink),
              C(atomics), C(prop)).
          type: list
          elements: dict
msg:
  description: One line summary.
  returned: always
  type: str
  sample: "2 GPU(s), pair 0: NVIDIA GeForce RTX 5080 x2 (pcie, fp4 native); 0 left over [nvml]"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.nvml import GpuInventoryError, gather, summary


def main():
    module = AnsibleModule(
        argument_spec={
            "group_size": {"type": "int", "default": 2},
            "allow_mixed": {"type": "bool", "default": False},
            "exclude": {"type": "list", "elements": "str", "default": []},
            "expected_pairs": {"type": "int"},
            "min_driver": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    params = module.params
    min_driver = {str(k): str(v) for k, v in (params["min_driver"] or {}).items()}
    try:
        fact = gather(group_size=params["group_size"], allow_mixed=params["allow_mixed"],
                      exclude=params["exclude"], expected_pairs=params["expected_pairs"], min_driver=min_driver)
    except GpuInventoryError as exc:
        extra = {"ansible_facts": {"pairserve_gpu": exc.fact}} if exc.fact else {}
        module.fail_json(msg=str(exc), **extra)
    for warning in fact.get("warnings") or []:
        module.warn(warning)
    # Read-only: nothing changes, in check mode or not.
    module.exit_json(changed=False, msg=summary(fact), ansible_facts={"pairserve_gpu": fact})


if __name__ == "__main__":
    main()
