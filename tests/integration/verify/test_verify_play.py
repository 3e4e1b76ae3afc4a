"""playbooks/verify.yml and playbooks/bench.yml against real CPU vLLM servers serving the tiny model.

The tiny model is overfit on verification.json's prompts, so the checks compare exact answers and can fail
for real. The image check against a served vision checkpoint, both ways, is test_image_truncation.py.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from verify_helpers import by_check, verify, verify_result

from support.ansible_runner import REPO, run_playbook
from support.ports import free_port
from lab.vllm_server import tiny_model

BENCH = REPO / "playbooks" / "bench.yml"


@pytest.fixture(scope="module")
def expectations():
    return str(tiny_model() / "verification.json")


@pytest.fixture(scope="module")
def broken_vllm(vllm_servers):
    """The same model, started as a replica whose rendered arguments did not arrive: a 1024-token context
    below the profile's 4096 and no --enable-auto-tool-choice."""
    return vllm_servers(name="broken", profile={"max_model_len": 1024, "enable_auto_tool_choice": False})


def test_verify_passes_against_the_live_backend(inventory, lab_vllm, expectations):
    res = verify(inventory, lab_vllm.base_url, lab_vllm.model, expectations, boot_log=lab_vllm.log_path)
    assert res.rc == 0, res.stdout[-4000:]
    result = verify_result(res)
    checks = by_check(result)
    assert set(checks) == {"text", "tool_call", "images_refused", "context_near_limit", "context_past_limit", "token_count"}
    assert all(c["ok"] for c in checks.values()), checks
    # a text route: the text-only checkpoint refuses an image with vLLM's own 400
    assert checks["images_refused"]["status"] == 400 and "not a multimodal model" in checks["images_refused"]["message"]
    # exact answers of the overfit model, not just "something came back"
    assert checks["text"]["content"] == "The pair is ready." and checks["text"]["reasoning"] == "verification"
    call = checks["tool_call"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    # the long prompt was built to the token, with the server's /tokenize
    assert 4096 - 8 - 1 - 16 <= checks["context_near_limit"]["prompt_tokens"] <= 4096 - 8 - 1
    assert checks["context_past_limit"]["status"] == 400
    assert checks["token_count"]["prompt_tokens"] == checks["token_count"]["reference"]
    assert result["boot"]["kv_cache_tokens"] >= 4096 and result["boot_problems"] == []


def test_the_first_verify_records_the_token_count_and_a_changed_count_fails(inventory, lab_vllm, tmp_path):
    """Without a reference (the real model: no expectations file), the first verify that passes records the fixed
    prompt's count per route on the server; the next one compares against it, a changed count (a tokenizer that now
    counts text differently) fails, and a new checkpoint revision records anew."""
    record = tmp_path / "verify-token-counts.json"

    def run(revision="a" * 40):
        return verify(inventory, lab_vllm.base_url, lab_vllm.model, "", token_record=str(record), revision=revision,
                      checks=["token_count"])

    first = run()
    assert first.rc == 0, (first.stdout[-3000:], first.stderr[-2000:])
    counts = json.loads(record.read_text())
    recorded = dict(counts[lab_vllm.model])
    assert recorded["prompt_tokens"] > 0 and recorded["checkpoint_revision"] == "a" * 40, counts
    assert by_check(verify_result(first))["token_count"]["reference"] is None

    second = run()
    assert second.rc == 0, second.stdout[-3000:]
    check = by_check(verify_result(second))["token_count"]
    assert check["ok"] and check["reference"] == recorded["prompt_tokens"], check
    assert json.loads(record.read_text()) == counts
    assert not [r for r in second.results if r.get("changed")], "a second verify changed something"

    counts[lab_vllm.model]["prompt_tokens"] += 1
    record.write_text(json.dumps(counts))
    changed = run()
    assert changed.rc != 0
    check = by_check(verify_result(changed))["token_count"]
    assert not check["ok"] and "the tokenizer changed" in check["message"], check
    assert check["reference"] == recorded["prompt_tokens"] + 1

    moved = run(revision="b" * 40)
    assert moved.rc == 0, moved.stdout[-3000:]
    entry = json.loads(record.read_text())[lab_vllm.model]
    assert entry["checkpoint_revision"] == "b" * 40 and entry["prompt_tokens"] == recorded["prompt_tokens"], entry


def test_verify_counts_tokens_through_the_route_when_tokenize_is_not_proxied(inventory, lab_vllm, expectations):
    res = verify(inventory, lab_vllm.base_url, lab_vllm.model, expectations, tokenize=False, checks=["context"])
    assert res.rc == 0, res.stdout[-4000:]
    checks = by_check(verify_result(res))
    assert checks["context_near_limit"]["ok"] and checks["context_past_limit"]["ok"]


def test_verify_fails_as_unreachable_when_the_backend_is_down(inventory, expectations):
    url = "http://127.0.0.1:%d" % free_port()
    res = verify(inventory, url, "qwen3-tiny", expectations)
    assert res.rc != 0
    result = verify_result(res)
    assert result["failed_checks"][0] == "text"
    text = by_check(result)["text"]
    assert text["class"] == "unreachable" and text["permanent"] is False
    assert "nothing answered at %s" % url in result["msg"]
    assert "transient" in result["diagnosis"]


def test_verify_fails_with_context_diagnosis_when_the_limit_is_below_the_check(inventory, broken_vllm, expectations):
    res = verify(inventory, broken_vllm.base_url, broken_vllm.model, expectations, boot_log=broken_vllm.log_path,
                 checks=["text", "context"])
    assert res.rc != 0
    result = verify_result(res)
    near = by_check(result)["context_near_limit"]
    assert near["class"] == "context_limit" and near["permanent"] is True and near["status"] == 400
    assert "inside the profile's max_model_len 4096, was refused" in near["message"]
    assert near["server_max_model_len"] == 1024
    assert by_check(result)["text"]["ok"], "text still works: the failure is the context, not the replica"
    # the boot log says the same before any request: started with 1024, the profile wants 4096
    assert any("started with max_model_len 1024, below the profile's 4096" in p for p in result["boot_problems"])
    assert "permanent: context_limit" in result["msg"]


def test_verify_fails_with_tools_diagnosis_when_the_replica_rejects_tool_calls(inventory, broken_vllm, expectations):
    res = verify(inventory, broken_vllm.base_url, broken_vllm.model, expectations, max_model_len=1024,
                 checks=["text", "tool_call"])
    assert res.rc != 0
    result = verify_result(res)
    tool = by_check(result)["tool_call"]
    assert tool["status"] == 400 and tool["class"] == "tools_disabled" and tool["permanent"] is True
    assert "--enable-auto-tool-choice" in tool["message"]
    assert by_check(result)["text"]["ok"]
    assert result["failed_checks"] == ["tool_call"]


def test_bench_weights_follow_measured_throughput(inventory, vllm_servers, tmp_path):
    # Two backends of different speed, one CPU each: the slow one runs one sequence at a time (the seed's
    # max-num-seqs 1, "4x less throughput"). One CPU each because OpenMP threads spread over two busy CPUs
    # measured slower than one: a shared CI machine must not decide which backend is fast.
    fast = vllm_servers(name="fast", threads_bind="1")
    slow = vllm_servers(name="slow", max_num_seqs=1, threads_bind="0")
    targets = [{"name": "fast", "base_url": fast.base_url, "model": fast.model, "kind": "replica",
                "tokenize_url": fast.base_url + "/tokenize"},
               {"name": "slow", "base_url": slow.base_url, "model": slow.model, "kind": "replica",
                "tokenize_url": slow.base_url + "/tokenize"}]
    extra = {"pairserve_bench_targets": targets, "pairserve_bench_report_dir": str(tmp_path),
             "pairserve_bench_decode_tokens": 32, "pairserve_bench_single_stream_requests": 2,
             "pairserve_bench_concurrency": 4, "pairserve_bench_rounds": 2, "pairserve_bench_sweep": [1, 4],
             "pairserve_bench_prefill_tokens": 1024, "pairserve_bench_label": "two-speeds"}
    res = run_playbook(BENCH, inventory=inventory, extra_vars=extra, timeout=900)
    assert res.rc == 0, res.stdout[-4000:]
    bench = [r for r in res.results if "weights" in r and "weight_basis" in r]
    assert bench, res.stdout[-4000:]
    bench = bench[-1]
    basis, weights = bench["weight_basis"], bench["weights"]
    assert basis["fast"] > 0 and basis["slow"] > 0
    # Which one is faster is measured, not assumed: on a busy 2-core CI machine the API server's per-token work
    # can hide the batching advantage (measured 84.7 vs 71.5 tok/s here). The weights must follow the measurement.
    # Shares are whole percents: a gap under 1 % (measured 284.5 vs 279.7 tok/s) rounds to 50/50, so the faster one
    # never gets less, and gets more once the gap survives rounding.
    faster, slower = sorted(basis, key=basis.get, reverse=True)
    assert weights[faster] >= weights[slower]
    if round(100 * basis[faster] / (basis[faster] + basis[slower])) > 50:
        assert weights[faster] > weights[slower]
    assert sum(weights.values()) == 100
    assert abs(weights["fast"] - 100 * basis["fast"] / (basis["fast"] + basis["slow"])) <= 1
    run_dir = Path(bench["run_dir"])
    report = (run_dir / "report.md").read_text()
    assert "| fast | %s | %d |" % (("%.1f" % basis["fast"]), weights["fast"]) in report
    png = (run_dir / "plot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] > 500
    results = json.loads((run_dir / "results.json").read_text())
    fast = results["targets"][0]["measurement"]
    assert fast["prefix_cache"]["cold_ttft_s"] > 0 and fast["prefill"]["prompt_tokens"] <= 1024
    assert [p["concurrency"] for p in fast["sweep"]["points"]] == [1, 4]
