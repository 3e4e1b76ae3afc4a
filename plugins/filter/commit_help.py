# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.commit_help (documented beside this file): how to find the commit sha to pin."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils.hub import REPO_ID_RE, how_to_find_commit


def commit_help(repo):
    """The one help text for a missing or wrong ``pairserve_checkpoint_revision``, naming ``repo``."""
    if not isinstance(repo, str) or not REPO_ID_RE.match(repo):
        raise AnsibleFilterError("pairserve.llm.commit_help: %r is not a Hugging Face repository id (org/name: "
                                 "pairserve_checkpoint_repo)" % (repo,))
    return how_to_find_commit(repo)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm checkpoint pin help."""

    def filters(self):
        return {"commit_help": commit_help}
