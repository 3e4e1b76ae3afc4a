"""Fixtures of the fault suite: a local hub with a 24 MiB shard and a full-size tokenizer, a GPUStack server of
its own (the suite kills it and stops its database, so no other test shares it), and the printed figures."""

from __future__ import annotations

import pytest

from faults_helpers import COUNTS, SEED, SHARD_BYTES, SHARD_REPO, tokenizer_repo
from support.checkpoint_repo import single_shard_repo
from support.fakehub import FakeHub
from support.gpustack_server import gpustack_server_fixture

# Not shared with tests/integration/gpustack: this one is broken on purpose, and it stops with its module.
gpustack_server = gpustack_server_fixture(scope="module")


@pytest.fixture(scope="session")
def hub():
    server = FakeHub([single_shard_repo(SHARD_REPO, SHARD_BYTES), tokenizer_repo()]).start()
    yield server
    server.stop()


@pytest.fixture()
def hf_env(tmp_path):
    """No token, endpoint or proxy from the developer's environment; no Xet (the local hub serves plain HTTP)."""
    return {"HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN": "", "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1",
            "HF_ENDPOINT": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def pytest_terminal_summary(terminalreporter):
    """The suite's figures, whatever the capture mode: kills tried, reruns converged, bytes re-sent, debris."""
    if not COUNTS:
        return
    terminalreporter.section("fault suite (seed %d; PAIRSERVE_FAULT_SEED replays it)" % SEED)
    for test, figures in COUNTS.items():
        terminalreporter.write_line("%s: %s" % (test, ", ".join("%s=%s" % kv for kv in figures.items())))
