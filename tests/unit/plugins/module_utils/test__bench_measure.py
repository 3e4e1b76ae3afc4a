"""Route weights from measured throughput, A/B verdicts, and the measured requests on the wire (the measurements
themselves run against real vLLM in tests/integration/verify)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import urls_session
from ansible_collections.pairserve.llm.plugins.module_utils._bench_measure import SHORT_PROMPT, compare, concurrent, single_stream, weights
from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Client


def test_seed_weights_58_42_from_244_and_177():
    assert weights({"qwen-node-a": 244.0, "qwen-node-b": 177.0}) == {"qwen-node-a": 58, "qwen-node-b": 42}


@pytest.mark.parametrize("values", [
    {"a": 1.0, "b": 1.0, "c": 1.0},
    {"a": 275.0, "b": 220.0},
    {"a": 1000.0, "b": 1.0},
    {"a": 0.3, "b": 0.3, "c": 0.4},
])
def test_weights_sum_to_100_and_keep_every_live_replica(values):
    result = weights(values)
    assert sum(result.values()) == 100
    assert all(w >= 1 for w in result.values()), "a weight of 0 would drop a healthy replica from the route"
    biggest = max(values, key=values.get)
    assert result[biggest] == max(result.values())


def test_weights_refuse_nothing_measured():
    with pytest.raises(ValueError, match="no throughput"):
        weights({"a": 0.0, "b": None})


def _measurement(decode, ttft, conc, prefill, cold, warm):
    return {"single_stream": {"decode_tok_s": decode, "ttft_s": ttft}, "concurrency": {"throughput_tok_s": conc},
            "prefill": {"prefill_tok_s": prefill}, "prefix_cache": {"cold_ttft_s": cold, "warm_ttft_s": warm}}


def test_compare_says_which_arm_improved_which_metric():
    # The seed's MTP arm: decode 64.9 -> 14.1 tok/s. A lower TTFT is an improvement, a lower tok/s is not.
    baseline = _measurement(64.9, 0.20, 244.0, 2767.0, 6.1, 0.54)
    mtp = _measurement(14.1, 0.20, 150.0, 2780.0, 5.0, 0.70)
    rows = {r["metric"]: r for r in compare(baseline, mtp)}
    assert rows["single-stream decode tok/s"]["verdict"] == "regressed"
    assert rows["single-stream decode tok/s"]["change"] == pytest.approx(-0.7827, abs=1e-4)
    assert rows["single-stream TTFT s"]["verdict"] == "unchanged"
    assert rows["prefill tok/s"]["verdict"] == "unchanged", "0.5 % is noise"
    assert rows["long-context TTFT cold s"]["verdict"] == "improved"
    assert rows["long-context TTFT warm s"]["verdict"] == "regressed"
    assert "ceiling tok/s (sweep)" not in rows, "metrics missing on either side are left out, not invented"


def test_measured_requests_never_repeat_a_prompt_nor_rebuild_the_tls_context(monkeypatch):
    """Every single-stream and concurrent request carries a prompt vLLM has not seen, so prefix caching cannot
    turn the measured TTFT into a cache hit's. Checked on the wire, against a local streaming endpoint.
    The client builds its TLS context once: building it per request put ~40 ms of CA loading into every TTFT."""
    seen = []
    contexts = []
    real_make_context = urls_session.make_context

    def counting_make_context(**kwargs):
        contexts.append(kwargs)
        return real_make_context(**kwargs)

    monkeypatch.setattr(urls_session, "make_context", counting_make_context)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body["messages"][-1]["content"])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for text in ("a", "b", "c"):
                self.wfile.write(b"data: " + json.dumps({"choices": [{"delta": {"content": text}}]}).encode() + b"\n\n")
            usage = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = Client("http://127.0.0.1:%d" % httpd.server_address[1], None, 10)
        single = single_stream(client, "m", 3, 3)
        concurrent(client, "m", 2, 3, 2)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(seen) == 7, seen
    assert len(set(seen)) == len(seen), seen
    assert all(p.endswith(SHORT_PROMPT) for p in seen), seen
    assert single["prompt_tokens"] == 12 and single["completion_tokens"] == 3, single
    assert contexts == [{"validate_certs": True}], contexts
