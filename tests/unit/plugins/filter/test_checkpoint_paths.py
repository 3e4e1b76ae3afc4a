"""The paths of a pinned checkpoint in the cache (filter pairserve.llm.checkpoint_paths): the same function and the
same names as module hf_snapshot's result; bad input refused by the variable's name."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.filter.checkpoint_paths import checkpoint_paths
from ansible_collections.pairserve.llm.plugins.module_utils import hub

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_the_filter_is_the_module_utils_rule():
    assert checkpoint_paths("/var/lib/pairserve/hf-cache", "org/name", COMMIT) == \
        hub.checkpoint_paths("/var/lib/pairserve/hf-cache", "org/name", COMMIT)
    # as the module's abspath: a trailing slash or a dot segment names the same folder
    assert checkpoint_paths("/var/lib/pairserve/hf-cache/", "org/name", COMMIT) == \
        checkpoint_paths("/var/lib/pairserve/./hf-cache", "org/name", COMMIT)
    assert checkpoint_paths("/c", "org/name", COMMIT)["export_path"] == "/c/models--org--name/pairserve/export/" + COMMIT


@pytest.mark.parametrize("args,words", [
    (("var/lib/cache", "org/name", COMMIT), "pairserve_checkpoint_cache_dir"),
    (("~/.cache/huggingface/hub", "org/name", COMMIT), "pairserve_checkpoint_cache_dir"),
    ((None, "org/name", COMMIT), "pairserve_checkpoint_cache_dir"),
    (("/c", "name-only", COMMIT), "pairserve_checkpoint_repo"),
    (("/c", "org/name", "main"), "pairserve_checkpoint_revision"),
    (("/c", "org/name", COMMIT.upper()), "pairserve_checkpoint_revision"),
])
def test_bad_input_is_named(args, words):
    with pytest.raises(AnsibleFilterError, match=words):
        checkpoint_paths(*args)
