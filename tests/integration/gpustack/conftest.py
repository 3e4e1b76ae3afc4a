"""Fixtures for the GPUStack module tests: one real GPUStack 2.2.3 + PostgreSQL per session."""

from __future__ import annotations

import pytest

from gpustack_helpers import CountingProxy
from support.gpustack_server import gpustack_server_fixture

gpustack_server = gpustack_server_fixture()


@pytest.fixture
def counting_proxy(gpustack_server):
    proxy = CountingProxy(gpustack_server.api_url)
    yield proxy
    proxy.close()
