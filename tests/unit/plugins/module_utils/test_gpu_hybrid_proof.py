"""The multimodal profile on a hybrid Qwen3.5 checkpoint, vLLM 0.25.1 on one H200: what was recorded, against the
collection's own code (docs/gpu-proof.md, "A hybrid Qwen3.5-family checkpoint with the multimodal profile").

tests/fixtures/gpu-proof/hybrid-qwen3_5-2026-12-02.json is one session on the lent H200: a tiny
random Qwen3_5ForConditionalGeneration (scripts/gpu_proof/build_tiny_hybrid.py: Gated-DeltaNet + full attention,
vision tower) and its NVFP4 copy (scripts/gpu_proof/quantize_tiny_hybrid_nvfp4.py), each started by
scripts/gpu_proof/serve_hybrid.sh with the argv that vllm_args.render() made of the built-in multimodal profile with
tensor_parallel_size 1 (one GPU). The record keeps the checkpoint's config.json, every server argv, the request
results and the boot-log lines that matter. These tests run in CI (no GPU): they render again from the recorded
config and check the recorded runs against that rendering and against vllm_log's parser.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# The collection resolves as ansible_collections.pairserve.llm through the link `make deps` creates.

from ansible_collections.pairserve.llm.plugins.module_utils import hub, vllm_args, vllm_log

REPO = Path(__file__).resolve().parents[4]

RECORD = REPO / "tests" / "fixtures" / "gpu-proof" / "hybrid-qwen3_5-2026-12-02.json"
RUNNER = ("--model", "--served-model-name", "--host", "--port")


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def facts(record, tmp_path_factory):
    """hub.describe_checkpoint() of the recorded config.json, as the replica role reads a checkpoint."""
    directory = tmp_path_factory.mktemp("hybrid")
    (directory / "config.json").write_text(json.dumps(record["checkpoint"]["config"]), encoding="utf-8")
    return hub.describe_checkpoint(str(directory))


def _runs(record, **match):
    return [r for r in record["runs"] if all(r.get(k) == v for k, v in match.items())]


def _flags(argv):
    return dict(vllm_args.argv_pairs(argv))


def test_the_checkpoint_is_the_seed_architecture_family(record, facts):
    config = record["checkpoint"]["config"]
    # The architecture vLLM 0.25.1 registers for Qwen3.5 and the seed's checkpoint declares.
    assert facts["architecture"] == "Qwen3_5ForConditionalGeneration" and facts["model_type"] == "qwen3_5"
    assert facts["hybrid"] is True and facts["vision"] is True and facts["mtp"] is False
    assert "linear_attention" in config["text_config"]["layer_types"]
    assert "full_attention" in config["text_config"]["layer_types"]
    # The seed's native context, so the multimodal profile's 65536 is not refused.
    assert facts["native_context"] == 262144
    assert facts == record["checkpoint_facts"]["bf16"]
    nvfp4 = record["checkpoint_facts"]["nvfp4"]
    assert {k: v for k, v in nvfp4.items() if k != "quantization"} == {k: v for k, v in facts.items() if k != "quantization"}
    assert record["nvfp4_checkpoint"]["quantization_config"]["format"] == "nvfp4-pack-quantized"


def test_rendered_argv_is_the_multimodal_profile_with_tp1(record, facts):
    # The only override is the inventory-level tensor_parallel_size (one GPU on the lent host).
    assert record["profile_input"] == {"name": "gpu-hybrid", "base": "multimodal", "tensor_parallel_size": 1}
    pair = {k: record["gpu_facts_for_render"][k] for k in ("memory_total_mib", "compute_capability")}
    again = vllm_args.render(record["profile_input"], "0.25.1", facts, pair)
    assert again.argv == record["rendered_argv"] and again.warnings == record["render_warnings"] == []
    builtin = vllm_args.render("multimodal", "0.25.1", facts, pair).argv
    assert builtin == record["builtin_multimodal_argv"]
    # Every flag of the built-in multimodal profile but TP, unchanged and in order; TP 2 -> 1.
    assert [a for a in builtin if not a.startswith("--tensor-parallel-size")] == \
        [a for a in again.argv if not a.startswith("--tensor-parallel-size")]
    assert "--tensor-parallel-size=2" in builtin and "--tensor-parallel-size=1" in again.argv
    # The flag this proof exists for: rendered because the checkpoint is hybrid.
    assert "--mamba-cache-mode=align" in again.argv
    assert "--language-model-only" not in again.argv  # the multimodal profile keeps the vision tower


def test_every_run_used_the_rendered_flags(record):
    rendered = record["rendered_argv"]
    for run in record["runs"]:
        argv = run["server_argv"]
        name = "attempt %d %s" % (run["attempt"], run["checkpoint"])
        # The rendered block, unchanged and in order, right after GPUStack-runner-style arguments.
        start = argv.index(rendered[0])
        assert argv[start:start + len(rendered)] == rendered, name
        assert {a.split("=", 1)[0] for a in argv[:start] if a.startswith("--")} <= set(RUNNER), name
        # Nothing else but the recorded host additions after it; never --enforce-eager.
        assert argv[start + len(rendered):] == run["host_args"], name
        assert "--enforce-eager" not in argv, name
        assert argv[argv.index("--model") + 1] == "MODELS/" + run["checkpoint"], name


def test_vllm_logged_the_rendered_flags_as_its_own_args(record):
    rendered = _flags(record["rendered_argv"])
    for run in record["runs"]:
        facts = vllm_log.parse_boot_log(run["log_lines"])
        args = facts["non_default_args"]
        name = "attempt %d %s" % (run["attempt"], run["checkpoint"])
        assert args["mamba_cache_mode"] == rendered["--mamba-cache-mode"] == "align", name
        assert args["enable_prefix_caching"] is True and args["trust_remote_code"] is True, name
        assert args["max_model_len"] == int(rendered["--max-model-len"]) == 65536, name
        assert args["max_num_seqs"] == int(rendered["--max-num-seqs"]), name
        assert args["max_num_batched_tokens"] == int(rendered["--max-num-batched-tokens"]), name
        assert args["reasoning_parser"] == rendered["--reasoning-parser"], name
        assert args["tool_call_parser"] == rendered["--tool-call-parser"], name
        assert args["override_generation_config"] == json.loads(rendered["--override-generation-config"]), name
        # TP 1, 0.92 and kv-cache-dtype auto are 0.25.1's defaults, so vLLM leaves them out of non-default args.
        assert "tensor_parallel_size" not in args and "gpu_memory_utilization" not in args, name
        assert ("gdn_prefill_backend" in args) == bool(run["host_args"]), name
        log = "\n".join(run["log_lines"])
        assert "Resolved architecture: Qwen3_5ForConditionalGeneration" in log, name
        assert "Prefix caching in Mamba cache 'align' mode is currently enabled" in log, name
        assert "Setting attention block size to 144 tokens" in log, name


def test_transformers_5_24_breaks_vllm_0_25_1s_multimodal_profiling(record):
    # Attempt 1: the checkpoint's own transformers (5.24.0) carried; the engine died in the dummy video profiling.
    runs = _runs(record, attempt=1)
    assert {r["checkpoint"] for r in runs} == {"bf16", "nvfp4"}
    for run in runs:
        assert run["transformers"].startswith("5.24.0") and run["outcome"] == "engine-init-failed"
        assert run["booted"] is False and run["requests"] is None
        log = "\n".join(run["log_lines"])
        assert "Found 1 <|video_pad|> tokens in the text but no videos were passed." in log
        assert "Failed to apply Qwen3VLProcessor on data={'text': '<|vision_start|><|video_pad|><|vision_end|>'}" in log
        assert "KV cache size" not in log


def test_booted_with_the_profile_flags_and_the_first_request_failed(record):
    # Attempt 2: the host's transformers 5.17.0; both checkpoints booted with exactly the rendered flags.
    runs = _runs(record, attempt=2)
    assert {r["checkpoint"] for r in runs} == {"bf16", "nvfp4"}
    for run in runs:
        name = run["checkpoint"]
        assert run["booted"] is True and run["outcome"] == "booted-requests-500", name
        facts = vllm_log.parse_boot_log(run["log_lines"])
        for key in ("kv_cache_tokens", "available_kv_cache_gib", "max_concurrency", "cuda_graphs"):
            assert facts[key] == run["boot_facts"][key], (name, key)  # the trimmed lines keep what the full log said
        assert facts["kv_cache_tokens"] > 500_000_000 and facts["concurrency_tokens_per_request"] == 65536, name
        assert facts["kv_errors"] == [], name
        # The mamba cache in align mode shares pages with full attention; CUDA graphs FULL for decode.
        assert {"phase": "decode", "mode": "FULL"} in facts["cuda_graphs"], name
        assert {"phase": "mixed prefill-decode", "mode": "PIECEWISE"} in facts["cuda_graphs"], name
        log = "\n".join(run["log_lines"])
        assert "Padding mamba page size" in log and "Using FlashAttention version 3" in log, name
        assert '"GET /health HTTP/1.1" 200 OK' in log, name
        # ... and every request answered 500: the GDN prefill backend 'auto' picked FlashInfer, not installed.
        assert "Using FlashInfer GDN prefill kernel (requested=auto" in log, name
        assert "ModuleNotFoundError: No module named 'flashinfer'" in log, name
        assert [run["requests"][k]["status"] for k in ("text", "image", "text_again")] == [500, 500, 500], name
    nvfp4 = "\n".join(_runs(record, attempt=2, checkpoint="nvfp4")[0]["log_lines"])
    assert "Using MarlinNvFp4LinearKernel for NVFP4 GEMM" in nvfp4  # Hopper: weight-only FP4 through Marlin


def test_the_triton_gdn_run_is_recorded_as_unfinished(record):
    (run,) = _runs(record, attempt=3)
    assert run["host_args"] == ["--gdn-prefill-backend=triton"]
    assert run["outcome"] == "boot-unfinished" and run["booted"] is False and run["requests"] is None
    log = "\n".join(run["log_lines"])
    assert "Using Triton/FLA GDN prefill kernel (requested=triton" in log
    assert "KV cache size" not in log and "Application startup complete" not in log


def test_fixture_is_clean(record):
    text = RECORD.read_text(encoding="utf-8")
    assert "\r" not in text  # ansible-test sanity refuses carriage returns
    assert "/work/" not in text  # model paths are recorded as MODELS/<checkpoint>
    assert record["device"]["device_time_s"] > 0 and record["vllm_version"] == "0.25.1"


def test_compressed_tensors_nvfp4_is_seen_as_fp4(record, tmp_path):
    # The record was taken before describe_checkpoint read compressed-tensors' format: it says what vLLM saw.
    assert record["checkpoint_facts"]["nvfp4"]["quantization"] == "compressed-tensors"
    config = dict(record["checkpoint"]["config"], quantization_config=record["nvfp4_checkpoint"]["quantization_config"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = hub.describe_checkpoint(str(tmp_path))
    assert facts["quantization"] == "nvfp4"
    # ... so the profile's FP4 check is consulted: a pair without an FP4 path is refused for this checkpoint.
    with pytest.raises(vllm_args.VllmArgsError, match="FP4"):
        vllm_args.render({"name": "multimodal", "tensor_parallel_size": 1}, checkpoint=facts,
                         pair={"compute_capability": "8.0", "fp4_path": "unsupported"})
