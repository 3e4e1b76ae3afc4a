"""Session fixtures of the CPU vLLM test ground (lab/vllm_server.py, through tests/support/vllm_server.py)."""

from support.vllm_server import lab_vllm, vllm_servers  # noqa: F401  pylint: disable=unused-import
