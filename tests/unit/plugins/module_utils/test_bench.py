"""Route weights, A/B verdicts and the report files (the measurements themselves run against real vLLM in
tests/integration/verify)."""

from __future__ import annotations

import json
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / ".cache" / "collections"))

from ansible_collections.pairserve.llm.plugins.module_utils import _files  # noqa: E402
from ansible_collections.pairserve.llm.plugins.module_utils import bench  # noqa: E402
from ansible_collections.pairserve.llm.plugins.module_utils import openai_probe  # noqa: E402
from ansible_collections.pairserve.llm.plugins.module_utils import urls_session  # noqa: E402
from lab.ansible_runner import run_module  # noqa: E402


def test_seed_weights_58_42_from_244_and_177():
    assert bench.weights({"qwen-node-a": 244.0, "qwen-node-b": 177.0}) == {"qwen-node-a": 58, "qwen-node-b": 42}


@pytest.mark.parametrize("values", [
    {"a": 1.0, "b": 1.0, "c": 1.0},
    {"a": 275.0, "b": 220.0},
    {"a": 1000.0, "b": 1.0},
    {"a": 0.3, "b": 0.3, "c": 0.4},
])
def test_weights_sum_to_100_and_keep_every_live_replica(values):
    result = bench.weights(values)
    assert sum(result.values()) == 100
    assert all(w >= 1 for w in result.values()), "a weight of 0 would drop a healthy replica from the route"
    biggest = max(values, key=values.get)
    assert result[biggest] == max(result.values())


def test_weights_refuse_nothing_measured():
    with pytest.raises(ValueError, match="no throughput"):
        bench.weights({"a": 0.0, "b": None})


def _measurement(decode, ttft, conc, prefill, cold, warm):
    return {"single_stream": {"decode_tok_s": decode, "ttft_s": ttft}, "concurrency": {"throughput_tok_s": conc},
            "prefill": {"prefill_tok_s": prefill}, "prefix_cache": {"cold_ttft_s": cold, "warm_ttft_s": warm}}


def test_compare_says_which_arm_improved_which_metric():
    # The seed's MTP arm: decode 64.9 -> 14.1 tok/s. A lower TTFT is an improvement, a lower tok/s is not.
    baseline = _measurement(64.9, 0.20, 244.0, 2767.0, 6.1, 0.54)
    mtp = _measurement(14.1, 0.20, 150.0, 2780.0, 5.0, 0.70)
    rows = {r["metric"]: r for r in bench.compare(baseline, mtp)}
    assert rows["single-stream decode tok/s"]["verdict"] == "regressed"
    assert rows["single-stream decode tok/s"]["change"] == pytest.approx(-0.7827, abs=1e-4)
    assert rows["single-stream TTFT s"]["verdict"] == "unchanged"
    assert rows["prefill tok/s"]["verdict"] == "unchanged", "0.5 % is noise"
    assert rows["long-context TTFT cold s"]["verdict"] == "improved"
    assert rows["long-context TTFT warm s"]["verdict"] == "regressed"
    assert "ceiling tok/s (sweep)" not in rows, "metrics missing on either side are left out, not invented"


def _run():
    m = _measurement(64.9, 0.2, 244.0, 2767.0, 6.1, 0.54)
    m["sweep"] = {"points": [{"concurrency": c, "throughput_tok_s": t} for c, t in ((1, 65.0), (8, 244.0),
                                                                                    (16, 275.0))],
                  "ceiling_tok_s": 275.0, "ceiling_at": 16, "knee_at": 16}
    n = _measurement(48.1, 0.3, 177.0, 1823.0, 8.0, 0.8)
    return {"label": "seed", "arm": "baseline", "started": "2026-08-22T10:00:00", "route": "qwen",
            "settings": {"decode_tokens": 256, "ignore_eos": True, "concurrency": 8, "prefill_tokens": 16384},
            "targets": [{"name": "qwen-node-a", "kind": "replica", "measurement": m},
                        {"name": "qwen-node-b", "kind": "replica", "measurement": n},
                        {"name": "qwen", "kind": "route", "error": "HTTP 503"}],
            "weights": {"qwen-node-a": 58, "qwen-node-b": 42},
            "weight_basis": {"qwen-node-a": 244.0, "qwen-node-b": 177.0}}


def test_markdown_report_reads_at_a_glance():
    text = bench.render_markdown(_run())
    assert "| qwen-node-a | replica | 64.9 | 0.200 | 244.0 | 275.0 (16) | 2767.0 | 6.100 → 0.540 |" in text
    assert "| qwen-node-a | 244.0 | 58 |" in text and "| qwen-node-b | 177.0 | 42 |" in text
    assert "| qwen | route | failed: HTTP 503 |" in text
    # llm_bench alone only derives the weights; only the bench play knows whether it applied them.
    assert "derived only (llm_bench never changes the route" in text and "not applied" not in text
    assert "not applied (set pairserve_bench_apply_weights: true)" in bench.render_markdown(dict(_run(), weights_applied=False))
    assert "applied to route `qwen` by the bench play (it had them already)" in bench.render_markdown(
        dict(_run(), weights_applied=True, weights_note=" (it had them already)"))


def test_plot_is_a_real_png(tmp_path):
    path = tmp_path / "plot.png"
    bench.render_plot(_run(), str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 500 and height > 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"], "written atomically, no leftovers"


def test_bench_module_refuses_bad_input_before_any_request(tmp_path):
    res = run_module("llm_bench", {"targets": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"},
                                               {"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
                                   "report_dir": str(tmp_path)})
    assert res.failed and "names must be unique" in res["msg"]
    res = run_module("llm_bench", {"targets": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
                                   "report_dir": str(tmp_path), "compare_with": [str(tmp_path / "nope.json")]})
    assert res.failed and "is not a results.json" in res["msg"]
    assert list(tmp_path.iterdir()) == []


def test_bench_module_check_mode_names_the_unreachable_target(tmp_path):
    res = run_module("llm_bench", {"targets": [{"name": "qwen-node-a", "base_url": "http://127.0.0.1:9",
                                                "model": "m"}], "report_dir": str(tmp_path)}, check=True)
    assert res.failed
    assert "qwen-node-a does not answer" in res["msg"] and "unreachable" in res["msg"]
    assert list(tmp_path.iterdir()) == [], "check mode writes nothing"


def test_results_json_is_what_the_report_says(tmp_path):
    run = _run()
    path = tmp_path / "results.json"
    _files.atomic_write(str(path), json.dumps(run))
    assert json.loads(path.read_text())["weights"] == {"qwen-node-a": 58, "qwen-node-b": 42}


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
        client = openai_probe.Client("http://127.0.0.1:%d" % httpd.server_address[1], None, 10)
        single = bench.single_stream(client, "m", 3, 3)
        bench.concurrent(client, "m", 2, 3, 2)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(seen) == 7, seen
    assert len(set(seen)) == len(seen), seen
    assert all(p.endswith(bench.SHORT_PROMPT) for p in seen), seen
    assert single["prompt_tokens"] == 12 and single["completion_tokens"] == 3, single
    assert contexts == [{"validate_certs": True}], contexts
