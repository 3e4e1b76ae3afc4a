"""llm_bench beside `vllm bench serve` on the hybrid Qwen3.5 checkpoint on a GPU: the record of 2026-12-06 (issue 41
part 1's bench ratio; docs/gpu-proof.md, "llm_bench beside vllm bench serve on the GPU (2026-12-06)").

tests/fixtures/gpu-proof/hybrid-bench-2026-12-06.json is one session on the lent H100: the tiny trained hybrid (bf16)
and its NVFP4 copy, each served by scripts/gpu_proof/serve_hybrid.sh with the multimodal profile's flags at TP=1 on the
Triton/FLA GDN prefill backend, then measured on that same server by scripts/gpu_proof/bench_compare.py (the
benchmark's own ours() = _bench_measure.single_stream, what llm_bench runs, and theirs() = `vllm bench serve`, six alternating
rounds) and by the collection's llm_bench; the NVFP4 server also by llm_verify. These tests run in CI (no GPU): they
render again from the recorded checkpoint facts and recompute the record's figures with the collection's rules.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import vl_tokens, vllm_args, vllm_log

REPO = Path(__file__).resolve().parents[4]

FIXTURES = REPO / "tests" / "fixtures" / "gpu-proof"
RECORD = FIXTURES / "hybrid-bench-2026-12-06.json"
ANSWERS = FIXTURES / "hybrid-qwen3_5-2026-12-06.json"
PROFILE = {"name": "gpu-hybrid", "base": "multimodal", "tensor_parallel_size": 1}
TRITON = "--gdn-prefill-backend=triton"
RUNNER = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model"]


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def answers():
    return json.loads(ANSWERS.read_text(encoding="utf-8"))


def _run(record, label):
    (run,) = [r for r in record["runs"] if r["label"] == label]
    return run


def test_each_server_ran_the_multimodal_profile_at_tp1_on_triton(record, answers):
    assert [r["label"] for r in record["runs"]] == ["bf16", "nvfp4", "bf16-b"]
    for run in record["runs"]:
        name = run["label"]
        pair = {k: run["gpu"][k] for k in ("memory_total_mib", "compute_capability")}
        again = vllm_args.render(PROFILE, "0.25.1", run["checkpoint_facts"], pair)
        assert again.argv == run["rendered_argv"] and again.warnings == run["render_warnings"] == [], name
        # The same flags as the answering runs of the earlier session: the bench measured the proved server.
        assert run["rendered_argv"] == answers["rendered_argv"], name
        assert run["command"][:4] == RUNNER and run["command"][-len(again.argv):] == again.argv, name
        assert run["host_args"] == [TRITON], name
        boot = vllm_log.parse_boot_log(run["log_lines"])
        assert boot["non_default_args"] == run["boot_facts"]["non_default_args"], name
        assert boot["non_default_args"]["gdn_prefill_backend"] == "triton", name
        assert boot["non_default_args"]["mamba_cache_mode"] == "align", name
        for key in ("kv_cache_tokens", "max_concurrency", "cuda_graphs"):
            assert boot[key] == run["boot_facts"][key], (name, key)
        log = "\n".join(run["log_lines"])
        assert "Using Triton/FLA GDN prefill kernel (requested=triton, head_k_dim=64)" in log, name
    nvfp4 = _run(record, "nvfp4")
    assert nvfp4["checkpoint_facts"]["quantization"] and "MarlinNvFp4LinearKernel" in "\n".join(nvfp4["log_lines"])
    assert _run(record, "bf16")["checkpoint_facts"]["quantization"] is None


def test_both_tools_measured_the_same_requests(record):
    for run in record["runs"]:
        cmp_, name = run["bench_compare"], run["label"]
        assert cmp_["error"] is None and run["bench_compare_rc"] == 0, name
        assert cmp_["base_url"] == "http://127.0.0.1:8000" and cmp_["model"] == "hybrid", name
        ours, theirs = cmp_["runs"]["ours"], cmp_["runs"]["vllm bench serve"]
        assert len(ours) == len(theirs) == cmp_["rounds"] == cmp_["rounds_asked"] >= 6, name
        # ignore_eos on both sides: every request decoded exactly output_len tokens; `vllm bench serve` was given our
        # prompt length of the round (a fresh 12-hex-digit prefix tokenizes to 65 or 66 tokens; the record keeps the last).
        assert all(r["completion_tokens"] == cmp_["output_len"] == 128 for r in ours), name
        assert {r["prompt_tokens"] for r in ours} <= {65, 66} and ours[-1]["prompt_tokens"] == cmp_["prompt_tokens"], name
        assert all(r["completed"] == cmp_["requests_per_round"] >= 6 for r in theirs), name


def test_the_ratios_are_the_medians_of_the_rounds(record):
    for run in record["runs"]:
        cmp_, name = run["bench_compare"], run["label"]
        pairs = list(zip(cmp_["runs"]["ours"], cmp_["runs"]["vllm bench serve"]))
        decode = [a["decode_tok_s"] / b["decode_tok_s"] for a, b in pairs]
        ttft = [a["ttft_ms"] / b["ttft_ms"] for a, b in pairs]
        assert decode == pytest.approx(cmp_["decode_ratios"]) and ttft == pytest.approx(cmp_["ttft_ratios"]), name
        assert cmp_["decode_ratio"] == pytest.approx(statistics.median(decode)), name
        assert cmp_["ttft_ratio"] == pytest.approx(statistics.median(ttft)), name


def test_decode_agrees_within_5_percent_and_ttft_on_two_of_three_samples(record):
    within = {}
    for run in record["runs"]:
        cmp_ = run["bench_compare"]
        assert abs(cmp_["decode_ratio"] - 1) <= record["instrument"]["target"], run["label"]
        within[run["label"]] = abs(cmp_["ttft_ratio"] - 1) <= record["instrument"]["target"]
    # docs/gpu-proof.md: the first bf16 sample's TTFT ratio (0.928, 6 rounds of 6) is outside 5 %, NVFP4's (1.009)
    # and the second bf16 sample's (0.981, 10 rounds of 8, another machine) inside.
    assert within == {"bf16": False, "nvfp4": True, "bf16-b": True}
    larger = _run(record, "bf16-b")["bench_compare"]
    assert (larger["rounds"], larger["requests_per_round"]) == (10, 8)


def test_the_spread_is_between_rounds_not_between_tools(record):
    # The server itself moves by more than the target from round to round (a 2.5 ms decode step and a 20 ms TTFT of
    # a 0.5M-parameter model are host overhead, not GPU work), on both tools: each tool's own rounds span more than 5 %.
    for run in record["runs"]:
        for tool, rows in run["bench_compare"]["runs"].items():
            for key in ("decode_tok_s", "ttft_ms"):
                values = [r[key] for r in rows]
                assert max(values) / min(values) > 1.05, (run["label"], tool, key)


def test_llm_bench_measured_the_same_servers(record):
    assert _run(record, "bf16-b")["llm_bench"] is None  # that call measured the ratio only
    for run in [_run(record, "bf16"), _run(record, "nvfp4")]:
        bench, name = run["llm_bench"], run["label"]
        assert bench["rc"] == 0 and bench["target"] == "hybrid-" + name and bench["model"] == "hybrid", name
        meas = bench["measurement"]
        assert meas["single_stream"]["completion_tokens"] == 256 and meas["single_stream"]["requests"] == 3, name
        # bench.sweep's rule: the ceiling is the best point, the knee the lowest concurrency within 5 % of it.
        points = meas["sweep"]["points"]
        assert [p["concurrency"] for p in points] == [1, 2, 4, 8, 16], name
        best = max(points, key=lambda p: p["throughput_tok_s"])
        knee = next(p for p in points if p["throughput_tok_s"] >= 0.95 * best["throughput_tok_s"])
        assert (meas["sweep"]["ceiling_tok_s"], meas["sweep"]["ceiling_at"]) == (best["throughput_tok_s"], best["concurrency"])
        assert meas["sweep"]["knee_at"] == knee["concurrency"] == 8, name
        assert meas["prefill"]["prompt_tokens"] == meas["prefix_cache"]["prompt_tokens"] == 8000, name
        assert meas["prefill"]["prefill_tok_s"] == pytest.approx(8000 / meas["prefill"]["ttft_s"], rel=1e-3), name
        cache = meas["prefix_cache"]
        assert cache["speedup"] == pytest.approx(cache["cold_ttft_s"] / cache["warm_ttft_s"], abs=0.02), name


def test_nvfp4_on_triton_answers_and_verify_fails_only_on_its_stale_template(record, answers):
    run = _run(record, "nvfp4")
    assert run["requests"]["text"]["content"].strip() == "The pair is ready."
    assert run["requests"]["text_again"]["content"].strip() == "The pair is ready."
    assert run["verify"]["failed_checks"] == ["images"]
    checks = {c["check"]: c for c in run["verify"]["checks"]}
    assert all(c["ok"] for name, c in checks.items() if name != "images")
    assert checks["token_count"]["prompt_tokens"] == answers["checkpoint"]["verification"]["reasoning_prompt_tokens"]
    assert checks["context_past_limit"]["status"] == 400
    # The copy was quantized before the template fix: one newline-joined placeholder token more per image, `config`.
    images = checks["images"]
    per_frame = vl_tokens.image_tokens(448, 448, vl_tokens.geometry(answers["checkpoint"]["preprocessor_config"]))
    assert images["class"] == "config" and images["image_tokens_expected"] == images["images"] * (per_frame + 2)
    assert images["image_tokens_server"] - images["image_tokens_expected"] == images["images"]
    assert run["chat_template"].startswith("pre-fix")


def test_prefix_caching_reused_the_repeated_image_on_both(record):
    for run in record["runs"]:
        requests = run["requests"]
        assert requests["image_large_again_cached_tokens"] == 144, run["label"]
        assert requests["image_again_cached_tokens"] == 0, run["label"]


def test_bf16_with_the_fixed_template_passes_every_check_on_the_measured_server(record, answers):
    run = _run(record, "bf16-b")
    assert run["chat_template"].startswith("fixed") and run["verify"]["failed_checks"] == []
    checks = {c["check"]: c for c in run["verify"]["checks"]}
    assert set(checks) == {"text", "tool_call", "images", "context_near_limit", "context_past_limit", "token_count"}
    assert all(c["ok"] for c in checks.values())
    per_frame = vl_tokens.image_tokens(448, 448, vl_tokens.geometry(answers["checkpoint"]["preprocessor_config"]))
    images = checks["images"]
    assert images["image_tokens_server"] == images["image_tokens_expected"] == images["images"] * (per_frame + 2)
    assert images["image_tokens_expected"] > vl_tokens.SEED_TRUNCATION
