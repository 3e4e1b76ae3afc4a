# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.vllm_cache_dir: the directory on a node behind its replicas' VLLM_CACHE_ROOT."""

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_cache_dir
short_description: The directory on a GPU node that keeps its replicas' vLLM compile cache
version_added: 0.1.0
author: pairserve.llm maintainers (@pairserve)
description:
  - The path, on the node and in the replica's container alike, of the C(VLLM_CACHE_ROOT) that
    M(pairserve.llm.gpustack_model) sends for a replica of the checkpoint at the input path, by the same function
    (C(plugins/module_utils/gpustack.py)); do not build it in Jinja.
  - By default C(<parent of the checkpoint path>/.vllm-cache), in the one directory GPUStack mounts into the replica's
    container, so that the compile cache survives a restart.
  - When O(env) sets C(VLLM_CACHE_ROOT) inside that directory, that path; when it sets one outside it, or the checkpoint
    path is not absolute, an empty string - nothing on the node backs the cache then.
  - Role P(pairserve.llm.replica#role) creates the directory before it registers the replicas.
positional: env
options:
  _input:
    description: The checkpoint path as the worker sees it (C(pairserve_replica_model_path)).
    type: str
    required: true
  env:
    description: The replica's extra environment (C(pairserve_replica_env)).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Create the directory the replicas keep vLLM's compile cache in
  ansible.builtin.file:
    path: "{{ pairserve_replica_model_path | pairserve.llm.vllm_cache_dir(pairserve_replica_env) }}"
    state: directory
    mode: "0755"
"""

RETURN = r"""
_value:
  description: The directory, or an empty string when nothing on the node backs the cache.
  type: str
  sample: /var/lib/pairserve/hf-cache/models--org--name/pairserve/export/.vllm-cache
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import replica_cache_dir


def vllm_cache_dir(model_path, env=None):
    if not isinstance(model_path, str):
        raise AnsibleFilterError("pairserve.llm.vllm_cache_dir: the checkpoint path (pairserve_replica_model_path) must "
                                 "be a string, got %s" % type(model_path).__name__)
    if env is not None and not isinstance(env, dict):
        raise AnsibleFilterError("pairserve.llm.vllm_cache_dir: the replica env (pairserve_replica_env) must be a dict "
                                 "of environment variables, got %s" % type(env).__name__)
    return replica_cache_dir(model_path, env) or ""


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm vLLM compile cache directory filter."""

    def filters(self):
        return {"vllm_cache_dir": vllm_cache_dir}
