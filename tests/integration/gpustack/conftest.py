"""Fixtures for the GPUStack module tests: one real GPUStack 2.2.3 + PostgreSQL per session."""

from __future__ import annotations

import pytest

from support.forwarding_proxy import ForwardingProxy
from support.gpustack_server import gpustack_server_fixture

gpustack_server = gpustack_server_fixture()


@pytest.fixture
def counting_proxy(gpustack_server):
    """A proxy to the server that counts what a module really sent (GPUStack 2.2.3 writes no access log)."""
    proxy = ForwardingProxy(gpustack_server.api_url)
    yield proxy
    proxy.close()
