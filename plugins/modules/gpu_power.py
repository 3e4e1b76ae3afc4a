#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module pairserve.llm.gpu_power: power draw per GPU and per pair over a window, from NVML."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_power
short_description: Sample the power draw of a node's GPUs over a window, per GPU and per tensor-parallel pair
version_added: 0.1.0
description:
  - Reads every GPU's power draw (C(nvmlDeviceGetPowerUsage)), its enforced power limit and, where the GPU has
    one (Volta and newer), its total energy counter (C(nvmlDeviceGetTotalEnergyConsumption)) through NVML,
    O(window_seconds) / O(interval_seconds) times on a fixed schedule. All GPUs are read in the same tick, so
    a pair's draw at a tick is the sum of its members'.
  - Returns per GPU and per pair the mean, minimum, maximum and 95th percentile (nearest rank) in watts, the
    energy a year at the mean draw (C(annual_kwh) = mean W * 8766 h / 1000; for an idle window, the annual idle
    energy), and from the energy counter the joules used in the window and the mean they imply.
  - Pairs come from M(pairserve.llm.gpu_pairs) (C(pairserve_gpu.pairs)) or as lists of GPU UUIDs.
  - Given the bench role's report (C(results.json) of M(pairserve.llm.llm_bench)) and which bench target each
    pair served, adds that target's throughput and, for a C(loaded) window, throughput per watt
    (tok/s per W, which is tokens per joule).
  - When the environment variable E(PAIRSERVE_NVML_REPLAY) names a recording, the real nvidia-ml-py runs over
    it; recordings with power series (C(tools/record_nvml.py --power-samples)) answer the samples in order.
    Every result then says C(source=replay:<file>).
author:
  - pairserve.llm maintainers (@pairserve)
requirements:
  - nvidia-ml-py (the C(pynvml) module) on the target, e.g. in the venv of the pairserve.llm.node_venv role.
  - An NVIDIA driver on the target, unless E(PAIRSERVE_NVML_REPLAY) is set.
extends_documentation_fragment:
  - pairserve.llm.attributes
  - pairserve.llm.attributes.INFO_MODULE
options:
  window_seconds:
    description:
      - How long to sample. The module takes O(window_seconds) / O(interval_seconds) samples (rounded), the
        first at once, and returns after the last one.
      - An idle window should be long enough for the cards to settle into their idle power state; GeForce cards
        drop their PCIe link and clocks within seconds of the last work, a minute covers it.
    type: float
    default: 60
  interval_seconds:
    description:
      - Seconds between samples. The driver refreshes the power reading about every 100 ms at best; some boards
        return a one-second average, so a shorter interval only repeats values.
    type: float
    default: 1
  pairs:
    description:
      - The pairs to report, each either a pair from M(pairserve.llm.gpu_pairs) (a dict with C(uuids) and
        optionally C(index) and C(name); C(pairserve_gpu.pairs) as it is) or a list of GPU UUIDs.
      - Every GPU of the host is sampled either way; pairs only group them.
    type: list
    elements: raw
    default: []
  phase:
    description:
      - What the GPUs are doing during the window, C(idle) (nothing served) or C(loaded) (a bench running).
        Only a C(loaded) window gives throughput per watt.
    type: str
    choices: [idle, loaded]
    default: idle
  bench_report:
    description:
      - The bench role's JSON report (C(results.json), or the registered result of M(pairserve.llm.llm_bench))
        as a dict, e.g. C("{{ lookup('file', path) | from_json }}").
    type: dict
  bench_targets:
    description:
      - 'Which bench target each pair served, by pair index, e.g. C({"0": "qwen-node-a"}).'
    type: dict
    default: {}
  return_samples:
    description:
      - Also return every sample (C(samples_w)) per GPU and per pair, for plots.
    type: bool
    default: true
notes:
  - The module only reads; it runs the same in check mode.
  - The draw is GPU board power as NVML reports it, not the host's wall power (CPU, fans, PSU losses are extra).
  - In a replay the energy counter's joules come from the recording while the time comes from the clock, so
    C(energy_mean_w) matches the recording only when it is replayed at the interval it was recorded with.
seealso:
  - module: pairserve.llm.gpu_pairs
  - module: pairserve.llm.llm_bench
  - name: docs/power.md
    description: The power report, the seed's idle figures and the H200 recording.
    link: https://github.com/pairserve/llm/blob/main/docs/power.md
"""

EXAMPLES = r"""
- name: Find the pairs
  pairserve.llm.gpu_pairs:
  vars:
    ansible_python_interpreter: "{{ pairserve_node_python }}"

- name: Idle draw per pair over a minute
  pairserve.llm.gpu_power:
    window_seconds: 60
    interval_seconds: 1
    pairs: "{{ pairserve_gpu.pairs }}"
  vars:
    ansible_python_interpreter: "{{ pairserve_node_python }}"
  register: idle

- name: Draw while the bench runs, with throughput per watt from its report
  pairserve.llm.gpu_power:
    window_seconds: 120
    phase: loaded
    pairs: "{{ pairserve_gpu.pairs }}"
    bench_report: "{{ lookup('ansible.builtin.file', '/srv/bench/20261130T120000-bench-baseline/results.json') | from_json }}"
    bench_targets:
      "0": qwen-node-a

- name: Two GPUs by UUID, replayed from a recording
  pairserve.llm.gpu_power:
    window_seconds: 2
    interval_seconds: 0.1
    pairs:
      - [GPU-5080a000-0000-4000-8000-000000000001, GPU-5080a000-0000-4000-8000-000000000002]
  environment:
    PAIRSERVE_NVML_REPLAY: "{{ playbook_dir }}/../tests/fixtures/nvml/node-a-2x5080.json"
"""

RETURN = r"""
power:
  description: The measurement.
  returned: success
  type: dict
  contains:
    source:
      description: C(nvml) for real hardware, C(replay:<file>) for a recording.
      type: str
      sample: nvml
    phase:
      description: The O(phase).
      type: str
      sample: idle
    samples:
      description: Samples taken per GPU.
      type: int
      sample: 60
    interval_s:
      description: The O(interval_seconds).
      type: float
      sample: 1.0
    elapsed_s:
      description: Seconds from the first sample to the end of the last.
      type: float
      sample: 59.012
    hours_per_year:
      description: Hours the annual figures assume (365.25 days).
      type: int
      sample: 8766
    gpus:
      description:
        - Every GPU in NVML order with C(index), C(uuid), C(bus_id), C(name), C(power_limit_w) (enforced),
          C(samples), C(mean_w), C(min_w), C(max_w), C(p95_w), C(annual_kwh), C(energy_j) and C(energy_mean_w)
          (from the energy counter; null where the GPU has none), C(unsupported) (what NVML refused, e.g.
          C(energy NotSupported)) and, with O(return_samples), C(samples_w).
      type: list
      elements: dict
    pairs:
      description:
        - One entry per O(pairs) item with C(index), C(name), C(uuids), C(power_limit_w) (summed), the same
          statistics over the pair's summed draw, C(energy_j), C(energy_mean_w), C(samples_w), and with
          O(bench_targets) a C(bench) dict (C(target), C(concurrency), C(decode_tok_s), C(throughput_tok_s),
          C(ceiling_tok_s), C(per_watt) (C(throughput_tok_s) and C(ceiling_tok_s) divided by the pair's mean
          draw, tok/s per W; null unless O(phase=loaded)), C(power_basis_w)).
      type: list
      elements: dict
      sample:
        - index: 0
          name: NVIDIA GeForce RTX 4070 Ti SUPER
          uuids: [GPU-4070b000-0000-4000-8000-000000000001, GPU-4070b000-0000-4000-8000-000000000002]
          power_limit_w: 570.0
          samples: 20
          mean_w: 102.8
          min_w: 101.5
          max_w: 104.5
          p95_w: 104.5
          annual_kwh: 901.1
          energy_j: null
          energy_mean_w: null
    total:
      description: All GPUs of the host, C(gpus), C(mean_w) and C(annual_kwh).
      type: dict
      sample: {gpus: 2, mean_w: 102.8, annual_kwh: 901.1}
msg:
  description: One line summary.
  returned: always
  type: str
  sample: "idle window, 60 samples every 1.0 s: pair 0 (NVIDIA GeForce RTX 5080): 21.6 W mean, 189.3 kWh/year; all 2 GPU(s): 21.6 W, 189.3 kWh/year [nvml]"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils import power
from ansible_collections.pairserve.llm.plugins.module_utils.nvml import GpuInventoryError


def main():
    module = AnsibleModule(
        argument_spec={
            "window_seconds": {"type": "float", "default": 60},
            "interval_seconds": {"type": "float", "default": 1},
            "pairs": {"type": "list", "elements": "raw", "default": []},
            "phase": {"type": "str", "choices": list(power.PHASES), "default": "idle"},
            "bench_report": {"type": "dict"},
            "bench_targets": {"type": "dict", "default": {}},
            "return_samples": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        fact = power.gather(window_seconds=params["window_seconds"], interval_seconds=params["interval_seconds"],
                            pairs=params["pairs"], phase=params["phase"], bench_report=params["bench_report"],
                            bench_targets=params["bench_targets"], return_samples=params["return_samples"])
    except (power.PowerError, GpuInventoryError) as exc:
        module.fail_json(msg=str(exc))
    # Read-only: nothing changes, in check mode or not.
    module.exit_json(changed=False, msg=power.summary(fact), power=fact)


if __name__ == "__main__":
    main()
