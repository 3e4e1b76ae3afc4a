"""The OpenAI-compatible client's plain parts: base URLs and error messages (over TLS: test_tls_clients.py)."""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Response, normalize_base_url


def test_base_url_forms_are_normalised():
    for url in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/chat/completions"):
        assert normalize_base_url(url) == "http://h:1"


def test_error_message_reads_vllms_and_gpustacks_bodies():
    assert Response("u", 400, {"error": {"message": "too long"}}, "").error_message() == "too long"
    assert Response("u", 503, {"error": "no instance"}, "").error_message() == "no instance"
    assert Response("u", 404, {"detail": "Not Found"}, "").error_message() == "Not Found"
    assert Response("u", 422, {"detail": [{"loc": ["body"]}]}, "").error_message() == '[{"loc": ["body"]}]'
    assert Response("u", None, None, "", 0.0, "unreachable: refused").error_message() == "unreachable: refused"
    summary = Response("u", 200, {}, "{}", 0.12345).summary()
    assert summary == {"url": "u", "status": 200, "elapsed_s": 0.123, "error": None, "message": None}
