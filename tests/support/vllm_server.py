"""Session fixtures over the lab's CPU vLLM server (lab/vllm_server.py says what it runs and costs):
`vllm_servers` starts servers that are stopped at the end of the session, `lab_vllm` is the shared one."""

from __future__ import annotations

import pytest

from lab.vllm_server import VllmServer, make_server


@pytest.fixture(scope="session")
def vllm_servers(tmp_path_factory):
    """Factory fixture: vllm_servers(name=..., max_num_seqs=..., threads_bind=..., profile=...) -> started VllmServer."""
    started = []
    log_dir = tmp_path_factory.mktemp("vllm")

    def start(**kwargs) -> VllmServer:
        try:
            server = make_server(log_dir, **kwargs)
            started.append(server)
            server.start()
        except RuntimeError as exc:
            pytest.fail(str(exc), pytrace=False)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def lab_vllm(vllm_servers):
    """The session's shared lab server (tiny model, lab profile)."""
    return vllm_servers(name="lab")
