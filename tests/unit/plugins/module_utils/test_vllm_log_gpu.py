"""Boot-log parser on a real GPU log: vLLM 0.25.1 (PyPI wheel), TP=2 on an NVLinked 2x H200 pair.

tests/fixtures/vllm-logs/h200-tp2-0.25.1.log is the boot log scripts/gpu_proof.sh captured on 2026-11-30
(docs/gpu-proof.md), trimmed only of the API route list and the 200 OK access lines of the verify and bench
requests; every line kept is byte for byte what vLLM printed, tqdm's carriage returns included.
tests/fixtures/gpu-proof/ holds what the same run rendered, verified and measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# The collection resolves as ansible_collections.pairserve.llm through the link `make deps` creates.

from ansible_collections.pairserve.llm.plugins.module_utils import vllm_args, vllm_log

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
LOG = FIXTURES / "vllm-logs" / "h200-tp2-0.25.1.log"
PROOF = FIXTURES / "gpu-proof"
# What GPUStack's runner adds around backend_parameters (and the parser logs with the rest).
RUNNER_KEYS = {"model", "host", "port", "served_model_name"}


@pytest.fixture(scope="module")
def facts():
    with open(LOG, encoding="utf-8") as handle:
        return vllm_log.parse_boot_log(handle)


def _rendered():
    return json.loads((PROOF / "argv.json").read_text(encoding="utf-8"))


def test_kv_cache_size_and_memory(facts):
    # "GPU KV cache size: 268,375,872 tokens" after "Available KV cache memory: 127.97 GiB" (per GPU, at 0.92).
    assert facts["kv_cache_tokens"] == 268375872
    assert facts["available_kv_cache_gib"] == 127.97
    assert facts["kv_errors"] == []
    assert facts["estimated_max_model_len"] is None


def test_maximum_concurrency_at_the_rendered_context(facts):
    assert facts["concurrency_tokens_per_request"] == 8192
    assert facts["max_concurrency"] == 32760.73
    # 268,375,872 / 8,192 = 32,760.73: the two lines agree with each other.
    assert round(facts["kv_cache_tokens"] / facts["concurrency_tokens_per_request"], 2) == facts["max_concurrency"]


def test_non_default_args_are_the_rendered_flags(facts):
    args = facts["non_default_args"]
    assert args is not None, "the non-default args line must parse as a dict"
    assert vllm_log.configured_max_model_len(facts) == 8192
    assert args["tensor_parallel_size"] == 2
    assert args["override_generation_config"] == {"temperature": 1.0, "top_p": 0.95, "top_k": 20}
    assert args["disable_custom_all_reduce"] is True  # the host addition, through the profile's extra_args
    rendered = {flag.lstrip("-").replace("-", "_"): value
                for flag, value in vllm_args.argv_pairs(_rendered()["rendered_argv"])}
    for key, value in args.items():
        if key in RUNNER_KEYS:
            continue
        assert key in rendered, "vLLM reports %s=%r, which the collection did not render" % (key, value)
        expected = True if rendered[key] is None else json.loads(rendered[key]) if rendered[key][:1] in "{[" else rendered[key]
        assert str(value) == str(expected) or value == expected, (key, value, rendered[key])
    # Rendered flags vLLM does not list equal its defaults in 0.25.1 (0.92 utilisation, auto KV cache dtype).
    assert set(rendered) - set(args) == {"gpu_memory_utilization", "kv_cache_dtype"}


def test_profile_context_fits(facts):
    assert vllm_log.assess_context(facts, 8192, "gpu-proof-tp2") == []
    # The built-in text profile's 98304 was refused by render() for this 8192-token checkpoint; had it been
    # served anyway with the old --max-model-len, the log would show it.
    problems = vllm_log.assess_context(facts, 98304, "gpu-proof-tp2")
    assert len(problems) == 1 and "max_model_len 8192, below the profile's 98304" in problems[0]


def test_the_log_has_both_cuda_graph_captures():
    text = LOG.read_text(encoding="utf-8")
    # 0.25.1 on the GPU prints the mode alone, no phase: cudagraph_mode FULL_AND_PIECEWISE.
    assert "Capturing CUDA graphs (PIECEWISE): 100%" in text
    assert "Capturing CUDA graphs (FULL): 100%" in text
    assert "'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE" in text


def test_cuda_graph_modes_are_parsed(facts):
    assert [g["mode"] for g in facts["cuda_graphs"]] == ["PIECEWISE", "FULL"]


def test_version_is_parsed(facts):
    assert facts["version"] == "0.25.1"


def test_committed_results_agree_with_the_trimmed_log(facts):
    # llm_verify parsed the untrimmed log on the host: trimming lost none of the facts.
    boot = json.loads((PROOF / "verify.json").read_text(encoding="utf-8"))["boot"]
    for key in ("kv_cache_tokens", "max_concurrency", "concurrency_tokens_per_request", "available_kv_cache_gib",
                "non_default_args", "kv_errors"):
        assert boot[key] == facts[key], key
