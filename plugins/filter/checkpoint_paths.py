# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.checkpoint_paths (documented beside this file): a pinned checkpoint's paths in the cache."""

from __future__ import annotations

import posixpath

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils.hub import COMMIT_RE, REPO_ID_RE, checkpoint_paths as paths


def checkpoint_paths(cache_dir, repo, revision):
    """The paths module hf_snapshot returns for ``repo`` at ``revision`` under ``cache_dir`` (one rule, hub.py)."""
    if not isinstance(cache_dir, str) or not cache_dir.startswith("/"):
        raise AnsibleFilterError("pairserve.llm.checkpoint_paths: the cache directory must be an absolute path on the "
                                 "node (pairserve_checkpoint_cache_dir), got %r" % (cache_dir,))
    if not isinstance(repo, str) or not REPO_ID_RE.match(repo):
        raise AnsibleFilterError("pairserve.llm.checkpoint_paths: %r is not a Hugging Face repository id (org/name: "
                                 "pairserve_checkpoint_repo)" % (repo,))
    if not isinstance(revision, str) or not COMMIT_RE.match(revision):
        raise AnsibleFilterError("pairserve.llm.checkpoint_paths: %r is not a 40-hex commit sha "
                                 "(pairserve_checkpoint_revision)" % (revision,))
    return paths(posixpath.normpath(cache_dir), repo, revision)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm checkpoint cache layout."""

    def filters(self):
        return {"checkpoint_paths": checkpoint_paths}
