"""A real vLLM 0.27.1 (CPU build) serving the tiny Qwen3 with the lab profile's rendered argv.

Proves the test ground the verify and bench plays rely on: chat, the qwen3 reasoning parser, the
qwen3_coder tool parser, prompt token accounting and the over-length 400 — and that the same checks fail
on the untrained twin, so none of them can pass on noise.
Cost: one server boot (~40 s) for the trained model, one for the random twin, a few seconds of requests.
"""

from __future__ import annotations

import json
import re

import pytest

from lab.vllm_server import tiny_model, verification_checks

pytestmark = pytest.mark.slow


def _check(checks, check_id):
    return next(c for c in checks["checks"] if c["id"] == check_id)


def _ask(server, check, **extra):
    body = dict(verification_checks(server.model_dir)["request"])
    if check["tools"]:
        body["tools"] = check["tools"]
    if check["chat_template_kwargs"]:
        body["chat_template_kwargs"] = check["chat_template_kwargs"]
    body.update(extra)
    resp = server.chat(check["messages"], **body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _passes(server, check):
    """True when the server's answer matches the check's expectation exactly (after strip)."""
    data = _ask(server, check)
    msg = data["choices"][0]["message"]
    expect = check["expect"]
    calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])} for c in msg.get("tool_calls") or []]
    return ((msg.get("reasoning") or "").strip() == (expect["reasoning"] or "")
            and (msg.get("content") or "").strip() == (expect["content"] or "")
            and calls == expect["tool_calls"])


@pytest.fixture(scope="module")
def checks(lab_vllm):
    return verification_checks(lab_vllm.model_dir)


def test_boot_uses_the_rendered_lab_argv_and_reports_cost(lab_vllm, record_property):
    assert "--kv-cache-memory-bytes" in lab_vllm.argv and "--enforce-eager" in lab_vllm.argv
    assert "--gpu-memory-utilization" not in lab_vllm.argv
    log = lab_vllm.log_text()
    # The boot-log lines the verify play parses (KV cache capacity and the concurrency it allows).
    assert re.search(r"KV cache size: ([\d,]+) tokens", log), log[-3000:]
    assert re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", log)
    record_property("boot_seconds", lab_vllm.boot_seconds)
    record_property("peak_rss_mib", lab_vllm.peak_rss_mib)
    print("lab vLLM boot %.1f s, peak RSS %.0f MiB" % (lab_vllm.boot_seconds, lab_vllm.peak_rss_mib))
    assert lab_vllm.rss_mib() > 100


def test_reasoning_goes_to_message_reasoning(lab_vllm, checks):
    data = _ask(lab_vllm, _check(checks, "reasoning"))
    msg = data["choices"][0]["message"]
    assert msg["reasoning"].strip() == "verification"
    assert msg["content"].strip() == "The pair is ready."


def test_thinking_disabled_gives_content_only(lab_vllm, checks):
    msg = _ask(lab_vllm, _check(checks, "no_thinking"))["choices"][0]["message"]
    assert (msg["content"] or "").strip() == "The pair is ready."
    assert not (msg.get("reasoning") or "").strip()


@pytest.mark.parametrize("check_id,city", [("tool_paris", "Paris"), ("tool_tokyo", "Tokyo")])
def test_tool_call_is_parsed(lab_vllm, checks, check_id, city):
    data = _ask(lab_vllm, _check(checks, check_id))
    choice = data["choices"][0]
    calls = choice["message"]["tool_calls"]
    assert len(calls) == 1, choice
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": city}
    assert choice["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("check_id", ["reasoning", "no_thinking", "tool_paris", "arithmetic", "greeting"])
def test_prompt_tokens_match_the_recorded_reference(lab_vllm, checks, check_id):
    check = _check(checks, check_id)
    assert _ask(lab_vllm, check)["usage"]["prompt_tokens"] == check["prompt_tokens"]


def test_over_length_prompt_is_a_400_naming_the_limit(lab_vllm):
    limit = int(lab_vllm.argv[lab_vllm.argv.index("--max-model-len") + 1])
    resp = lab_vllm.chat([{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * limit}], max_tokens=8, temperature=0)
    assert resp.status_code == 400, resp.text[:500]
    assert "maximum context length is %d tokens" % limit in resp.text


def test_long_prompt_past_the_tokenizer_truncation_is_not_cut(lab_vllm, checks):
    # tokenizer.json keeps truncation.max_length 2048 like the seed's checkpoint; vLLM's text path ignores it,
    # so a 2048+ token text prompt is served whole (the seed's failure needed the image processor).
    assert checks["tokenizer_truncation_max_length"] == 2048
    resp = lab_vllm.chat([{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 300}], max_tokens=4, temperature=0)
    assert resp.status_code == 200, resp.text[:500]
    assert 2048 < resp.json()["usage"]["prompt_tokens"] < 4096


def test_random_twin_fails_the_same_checks(vllm_servers, lab_vllm, checks):
    twin = vllm_servers(name="random-twin", model_dir=tiny_model(random=True))
    assert verification_checks(twin.model_dir)["trained"] is False
    for check_id in ("reasoning", "tool_paris", "no_thinking"):
        check = _check(checks, check_id)
        assert _passes(lab_vllm, check), check_id
        assert not _passes(twin, check), "%s passed on random weights: the check cannot fail" % check_id
