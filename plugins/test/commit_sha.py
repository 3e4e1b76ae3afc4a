# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests pairserve.llm.commit_sha and pairserve.llm.hf_repo_id (documented beside this file): the one rule for a
pinned checkpoint revision and for its repository's id."""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils.hub import COMMIT_RE, REPO_ID_RE


def commit_sha(value):
    """True for a full 40-hex lowercase commit sha (what hf_snapshot pins and GPUStack cannot: it has no revision)."""
    return isinstance(value, str) and bool(COMMIT_RE.match(value))


def hf_repo_id(value):
    """True for a Hugging Face repository id, ``org/name``."""
    return isinstance(value, str) and bool(REPO_ID_RE.match(value))


class TestModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm checkpoint pin tests."""

    def tests(self):
        return {"commit_sha": commit_sha, "hf_repo_id": hf_repo_id}
