"""llm_verify through Ansible: its input checks refuse before any request."""

from __future__ import annotations

import pytest

from support.ansible_runner import run_module


@pytest.mark.parametrize("args, message", [
    ({"checks": ["context"], "max_model_len": None}, "the context check needs max_model_len"),
    ({"text": {"max_tokens": 4}}, "leaves no room for reasoning"),
    ({"tool_call": {"tools": [{"type": "function"}]}}, "is not an OpenAI tool schema"),
    # The old default, ten 64x64 frames: a few dozen image tokens, which pass on a checkpoint that still truncates.
    ({"checks": ["images"], "image_count": 10, "image_size": 64}, "not past the 2048 tokens"),
    ({"checks": ["images"], "image_count": 10}, "Raise image_count (at least 11)"),
    ({"checks": ["images"], "image_processor": {"patch_size": 0}}, "image_processor: preprocessor patch_size"),
])
def test_verify_refuses_bad_input_before_any_request(args, message):
    res = run_module("llm_verify", dict({"base_url": "http://127.0.0.1:9", "model": "m", "max_model_len": 4096}, **args))
    assert res.failed and message in res["msg"]
    assert "checks" not in res.result, "nothing was sent"
