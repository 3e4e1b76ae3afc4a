"""Real CPU vLLM servers for the verify and bench tests (tests/support/vllm_server.py starts and stops them)."""

from support.vllm_server import lab_vllm, vllm_servers  # noqa: F401  pylint: disable=unused-import
