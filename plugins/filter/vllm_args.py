# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.vllm_args: the vLLM argv of one replica (warnings: see vllm_profile_check)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_args
short_description: Render the vLLM arguments of one replica for a pinned vLLM version
version_added: 0.1.0
author: pairserve.llm maintainers
description:
  - Turns a serving profile, the pinned vLLM version, the checkpoint's facts and the GPU pair's facts into
    the argument list GPUStack's C(backend_parameters) takes.
  - Version-aware, for vLLM 0.25.1, 0.27.1, 0.28.0, 0.29.0, 0.30.0, 0.31.0, 0.32.0 and 0.33.0. C(--mamba-cache-mode)
    is rendered only for hybrid checkpoints and only before 0.33 (C(all) is refused from 0.32); negative booleans
    are spelled C(--no-enable-X), which every supported release parses; parser names are checked against the
    pinned release's registry.
  - Refuses what the seed deployment proved broken, with the reason in the error - pipeline parallelism,
    C(gpu_memory_utilization) above 0.95, a context longer than the checkpoint's native one, MTP outside an
    explicit A/B arm or without an MTP head, a vision profile on a checkpoint without a vision tower, an NVFP4
    checkpoint on a pair without an FP4 path.
  - A filter cannot warn. Use P(pairserve.llm.vllm_profile_check#filter) to get the warnings too
    (C(gpu_memory_utilization) above 0.92, C(max_num_seqs) 1, MTP arms) and show them in a task.
  - See docs/vllm-arguments.md for every rule and the seed lesson behind it.
positional: version, checkpoint, pair
options:
  _input:
    description:
      - The profile, either a built-in name (V(multimodal), V(text), V(lab)) or a dict of profile keys.
      - A dict starts from the built-in named by its C(base) key (default its C(name) when that is built-in, else
        V(multimodal)) and overrides it key by key. A name that is not built-in, with no other key (no settings and
        no C(base)), is refused rather than rendered as V(multimodal). Keys are tensor_parallel_size, pipeline_parallel_size,
        max_model_len, gpu_memory_utilization, kv_cache_memory_bytes, kv_cache_dtype, max_num_seqs,
        max_num_batched_tokens, reasoning_parser, enable_auto_tool_choice, tool_call_parser, enable_prefix_caching,
        mamba_cache_mode, trust_remote_code, enforce_eager, override_generation_config, vision, speculative, ab_arm,
        extra_args.
    type: raw
    required: true
  version:
    description: The pinned vLLM version.
    type: str
    default: "0.25.1"
  checkpoint:
    description:
      - Checkpoint facts from its C(config.json) - architecture, model_type, hybrid (bool), vision (bool),
        mtp (bool), native_context (int), quantization (str).
    type: dict
    default: {}
  pair:
    description:
      - GPU pair facts as P(pairserve.llm.gpu_pairs#module) reports them - memory_total_mib (per GPU, the smaller
        card), compute_capability (for example V(12.0)), fp4_path (V(native), V(marlin) or V(unsupported); derived
        from compute_capability when absent).
    type: dict
    default: {}
  style:
    description:
      - V(equals) gives one element per flag (C(--max-model-len=65536)), the form GPUStack's backend_parameters use.
      - V(split) gives flag and value as separate elements, for a command line.
    type: str
    default: equals
    choices: [equals, split]
"""

EXAMPLES = r"""
- name: Render the seed's text profile for vLLM 0.25.1
  ansible.builtin.set_fact:
    replica_args: >-
      {{ 'text' | pairserve.llm.vllm_args('0.25.1', pairserve_checkpoint_facts, pairserve_gpu.pairs[0]) }}

- name: A tuned profile on top of the multimodal defaults
  ansible.builtin.debug:
    msg: >-
      {{ {'base': 'multimodal', 'max_model_len': 49152} | pairserve.llm.vllm_args('0.27.1', checkpoint, pair) }}
"""

RETURN = r"""
_value:
  description: The vLLM argument list, in the seed's flag order, then C(extra_args).
  type: list
  elements: str
  sample: ["--tensor-parallel-size=2", "--max-model-len=65536", "--gpu-memory-utilization=0.92"]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils.vllm_args import DEFAULT_VERSION, VllmArgsError, render


def _render(profile, version, checkpoint, pair, style):
    try:
        return render(profile, version, checkpoint, pair, style=style)
    except VllmArgsError as exc:
        raise AnsibleFilterError("pairserve.llm.vllm_args: %s" % exc) from exc


def vllm_args(profile, version=DEFAULT_VERSION, checkpoint=None, pair=None, style="equals"):
    """Profile -> argv list (warnings dropped: use vllm_profile_check to see them)."""
    return _render(profile, version, checkpoint, pair, style).argv


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm vLLM argument filter."""

    def filters(self):
        return {"vllm_args": vllm_args}
