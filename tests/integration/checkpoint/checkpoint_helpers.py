"""Paths and digests the checkpoint tests share."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from support.checkpoint_repo import COMMIT_A, REPO_ID

PRIVATE_REPO = "pairserve-test/private-checkpoint"
PRIVATE_TOKEN = "hf_pairserve_test_token"
BIG_REPO = "pairserve-test/one-big-shard"
BIG_SHARD = 24 * 1024 * 1024  # over huggingface_hub's 10 MiB read chunk, so a resume has something to keep


def snapshot_args(hub, cache, **extra) -> dict:
    args = {"repo_id": REPO_ID, "revision": COMMIT_A, "endpoint": hub.endpoint, "cache_dir": str(cache)}
    args.update(extra)
    return args


def repo_dir(cache: Path, repo_id: str = REPO_ID) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def snap(cache: Path, commit: str = COMMIT_A, repo_id: str = REPO_ID) -> Path:
    return repo_dir(cache, repo_id) / "snapshots" / commit


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree(path: Path) -> list[str]:
    """Every entry below path (files, links, dirs), for 'nothing was written' assertions."""
    if not path.exists():
        return []
    return sorted(os.path.relpath(os.path.join(root, n), path) for root, dirs, files in os.walk(path)
                  for n in dirs + files)
