"""The directory on a node behind its replicas' VLLM_CACHE_ROOT (filter pairserve.llm.vllm_cache_dir): the same
function as the env gpustack_model sends, an empty string when nothing on the node backs it, bad input named."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.filter.vllm_cache_dir import vllm_cache_dir
from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import replica_env

CKPT = "/var/lib/pairserve/hf-cache/models--org--name/pairserve/export/0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("env", [{}, {"OTHER": "1"}, {"VLLM_CACHE_ROOT": CKPT.rsplit("/", 1)[0] + "/mine"}])
def test_the_filter_names_the_directory_of_the_env_the_module_sends(env):
    assert vllm_cache_dir(CKPT, env) == replica_env(CKPT, env)["VLLM_CACHE_ROOT"]


def test_the_default_is_beside_the_checkpoint_in_the_mounted_parent():
    assert vllm_cache_dir(CKPT) == CKPT.rsplit("/", 1)[0] + "/.vllm-cache"
    assert vllm_cache_dir(CKPT + "/", None) == vllm_cache_dir(CKPT)
    assert vllm_cache_dir("/srv/ckpt", {}) == "/srv/.vllm-cache"


@pytest.mark.parametrize("path,env", [
    (CKPT, {"VLLM_CACHE_ROOT": "/data/vllm-cache"}),
    (CKPT, {"VLLM_CACHE_ROOT": "relative"}),
    ("relative/ckpt", {}),
    ("", {}),
])
def test_nothing_on_the_node_backs_it(path, env):
    assert vllm_cache_dir(path, env) == ""


@pytest.mark.parametrize("args,words", [
    ((None, {}), "pairserve_replica_model_path"),
    ((["/srv/ckpt"], {}), "pairserve_replica_model_path"),
    (("/srv/ckpt", ["A=1"]), "pairserve_replica_env"),
])
def test_bad_input_is_named(args, words):
    with pytest.raises(AnsibleFilterError, match=words):
        vllm_cache_dir(*args)
