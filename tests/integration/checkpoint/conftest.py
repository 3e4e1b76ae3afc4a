"""One local hub for the checkpoint tests: the real huggingface_hub client against 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.checkpoint_repo import checkpoint_repo, single_shard_repo
from support.fakehub import FakeHub

from checkpoint_helpers import BIG_REPO, BIG_SHARD, PRIVATE_REPO, PRIVATE_TOKEN


@pytest.fixture(scope="session")
def hub():
    server = FakeHub([checkpoint_repo(), checkpoint_repo(token=PRIVATE_TOKEN, repo_id=PRIVATE_REPO),
                      single_shard_repo(BIG_REPO, BIG_SHARD)]).start()
    yield server
    server.stop()


@pytest.fixture()
def fresh_hub(hub):
    hub.reset_log()
    hub.release()
    yield hub
    hub.release()


@pytest.fixture()
def hf_env(tmp_path):
    """No token or endpoint from the developer's own environment leaks into a test."""
    home = tmp_path / "hf-home"
    return {"HF_HOME": str(home), "HF_TOKEN": "", "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1",
            "HF_ENDPOINT": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


@pytest.fixture()
def cache(tmp_path) -> Path:
    return tmp_path / "hub-cache"
