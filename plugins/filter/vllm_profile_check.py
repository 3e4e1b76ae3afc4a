# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.vllm_profile_check: the vLLM argv of a profile plus the warnings a role should show."""

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_profile_check
short_description: Render vLLM arguments and return the warnings with them
version_added: 0.1.0
author: pairserve.llm maintainers
description:
- The same rendering and refusals as P(pairserve.llm.vllm_args#filter), returning a dict with the argument list,
  the warnings a role should show, the resolved profile and the version.
- Warnings are settings the seed showed to be risky but not always wrong - C(gpu_memory_utilization) above 0.92
  (0.95 booted with 10 MiB free and died on a 34 MiB activation), below 0.92 on 16 GiB cards (0.90 missed the
  KV check by 20 MiB), C(max_num_seqs) 1 (hides OOM at a 4x throughput cost) and MTP A/B arms (4.6x slower decode
  on the seed's stack).
- 'Show them from a role with a task such as C(ansible.builtin.debug: msg={{ check.warnings }}) when C(check.warnings
  | length > 0), or fail on them with C(ansible.builtin.assert) where a strict mode is wanted.'
positional: version, checkpoint, pair
options:
  _input:
    description: The profile, a built-in name (V(multimodal), V(text), V(lab)) or a dict of profile keys.
    type: raw
    required: true
  version:
    description: The pinned vLLM version.
    type: str
    default: 0.25.1
  checkpoint:
    description:
      - Checkpoint facts (architecture, model_type, hybrid, vision, mtp, native_context, quantization).
      - V(unknown) before the checkpoint is downloaded - rendered against one that has whatever the profile asks for
        (vision tower, hybrid layers, MTP head), so that only the profile's own mistakes and the pair's limits show.
    type: raw
    default: {}
  pair:
    description: GPU pair facts as gpu_pairs reports them (memory_total_mib per GPU, compute_capability, fp4_path).
    type: dict
    default: {}
  style:
    description: V(equals) for C(--flag=value) elements, V(split) for separate flag and value elements.
    type: str
    default: equals
    choices:
    - equals
    - split
"""

EXAMPLES = r"""
- name: Render the replica's arguments with their warnings
  ansible.builtin.set_fact:
    replica_vllm: "{{ pairserve_replica_profile | pairserve.llm.vllm_profile_check(pairserve_vllm_version, checkpoint, pair) }}"

- name: Show what the seed warns about in this profile
  ansible.builtin.debug:
    msg: "{{ replica_vllm.warnings }}"
  when: replica_vllm.warnings | length > 0
"""

RETURN = r"""
_value:
  description: The rendering.
  type: dict
  contains:
    argv:
      description: The vLLM argument list.
      type: list
      elements: str
    warnings:
      description: Human-readable warnings, each naming the setting and the seed lesson behind it.
      type: list
      elements: str
    profile:
      description: The profile after defaults were filled in.
      type: dict
    version:
      description: The vLLM version rendered for.
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils.vllm_args import ANY_CHECKPOINT, DEFAULT_VERSION, VllmArgsError, render


def vllm_profile_check(profile, version=DEFAULT_VERSION, checkpoint=None, pair=None, style="equals"):
    """Profile -> {argv, warnings, profile (resolved), version}. ``checkpoint`` "unknown": not downloaded yet."""
    if checkpoint == "unknown":
        checkpoint = ANY_CHECKPOINT
    elif checkpoint is not None and not isinstance(checkpoint, dict):
        raise AnsibleFilterError("pairserve.llm.vllm_profile_check: checkpoint must be the checkpoint facts (a dict) or "
                                 "'unknown', got %r" % (checkpoint,))
    try:
        rendered = render(profile, version, checkpoint, pair, style=style)
    except VllmArgsError as exc:
        raise AnsibleFilterError("pairserve.llm.vllm_profile_check: %s" % exc) from exc
    return {"argv": rendered.argv, "warnings": rendered.warnings, "profile": rendered.profile, "version": str(version)}


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm vLLM profile check filter."""

    def filters(self):
        return {"vllm_profile_check": vllm_profile_check}
