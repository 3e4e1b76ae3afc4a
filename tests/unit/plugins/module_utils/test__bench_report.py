"""llm_bench's report files: the markdown read at a glance, the plot, results.json."""

from __future__ import annotations

import json
import struct

from ansible_collections.pairserve.llm.plugins.module_utils import _files
from ansible_collections.pairserve.llm.plugins.module_utils._bench_report import render_markdown, render_plot


def _measurement(decode, ttft, conc, prefill, cold, warm):
    return {"single_stream": {"decode_tok_s": decode, "ttft_s": ttft}, "concurrency": {"throughput_tok_s": conc},
            "prefill": {"prefill_tok_s": prefill}, "prefix_cache": {"cold_ttft_s": cold, "warm_ttft_s": warm}}


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
    text = render_markdown(_run())
    assert "| qwen-node-a | replica | 64.9 | 0.200 | 244.0 | 275.0 (16) | 2767.0 | 6.100 → 0.540 |" in text
    assert "| qwen-node-a | 244.0 | 58 |" in text and "| qwen-node-b | 177.0 | 42 |" in text
    assert "| qwen | route | failed: HTTP 503 |" in text
    # llm_bench alone only derives the weights; only the bench play knows whether it applied them.
    assert "derived only (llm_bench never changes the route" in text and "not applied" not in text
    assert "not applied (set pairserve_bench_apply_weights: true)" in render_markdown(dict(_run(), weights_applied=False))
    assert "applied to route `qwen` by the bench play (it had them already)" in render_markdown(
        dict(_run(), weights_applied=True, weights_note=" (it had them already)"))


def test_plot_is_a_real_png(tmp_path):
    path = tmp_path / "plot.png"
    render_plot(_run(), str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 500 and height > 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"], "written atomically, no leftovers"


def test_results_json_is_what_the_report_says(tmp_path):
    run = _run()
    path = tmp_path / "results.json"
    _files.atomic_write(str(path), json.dumps(run))
    assert json.loads(path.read_text())["weights"] == {"qwen-node-a": 58, "qwen-node-b": 42}
