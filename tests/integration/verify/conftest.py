"""Real CPU vLLM servers for the verify and bench tests (lab/vllm_server.py, through tests/support/vllm_server.py),
and the one-host inventory the plays run on."""

import pytest

from support.vllm_server import lab_vllm, vllm_servers  # noqa: F401  pylint: disable=unused-import


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    path = tmp_path_factory.mktemp("inv") / "hosts.yml"
    path.write_text("all:\n  children:\n    gpustack_server:\n      hosts:\n        localhost:\n"
                    "          ansible_connection: local\n")
    return path
