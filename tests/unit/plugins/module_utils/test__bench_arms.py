"""The bench play's A/B arms: validation before anything changes, and the arm's profile over the node's."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import vllm_args
from ansible_collections.pairserve.llm.plugins.module_utils._bench_arms import ARM_REPLICA_KEYS, ArmError, arm_profile, check_arms


NODES = ["node-a", "node-b"]


def test_both_arm_forms_are_accepted_and_tagged():
    arms = check_arms([
        {"name": "seqs-2", "node": "node-b", "replica": {"max_num_seqs": 2}},
        {"name": "mtp", "node": "node-a", "replica": {"speculative": {"method": "mtp", "num_speculative_tokens": 2},
                                                      "env": {"VLLM_X": "1"}}},
        {"name": "external", "targets": [{"name": "x", "base_url": "http://127.0.0.1:9", "model": "m"}]},
    ], NODES)
    assert [a["kind"] for a in arms] == ["node", "node", "endpoint"]
    assert arms[0]["replica"] == {"max_num_seqs": 2}


@pytest.mark.parametrize("arm, needle", [
    ({"name": "x", "node": "node-c", "replica": {"max_num_seqs": 2}}, "node 'node-c' is not a host of group gpu_nodes"),
    ({"name": "x", "node": "node-b", "replica": {}}, "an arm that changes nothing measures the baseline again"),
    ({"name": "x", "node": "node-b", "replica": {"max_num_seq": 2}}, "replica key(s) max_num_seq cannot be overridden"),
    ({"name": "x", "node": "node-b", "replica": {"ab_arm": False}}, "replica key(s) ab_arm cannot be overridden"),
    ({"name": "x", "node": "node-b", "replica": {"env": ["A=1"]}}, "replica.env must map variable names"),
    ({"name": "x", "node": "node-b", "replica": {"extra_args": "--max-num-seqs=2"}}, "extra_args must be a list"),
    ({"name": "x", "node": "node-b", "replica": {"max_num_seqs": 2}, "targets": []}, "not both"),
    ({"name": "x"}, "not neither"),
    ({"name": "x", "targets": []}, "targets must be a non-empty list"),
    ({"name": "x", "targets": [{"name": "t", "model": "m"}]}, "targets[0] lacks base_url"),
    ({"name": "a b", "node": "node-b", "replica": {"max_num_seqs": 2}}, "name must be letters"),
    ({"name": "baseline", "node": "node-b", "replica": {"max_num_seqs": 2}}, "'baseline' is the run every arm"),
    ({"name": "x", "node": "node-b", "replica": {"max_num_seqs": 2}, "nodes": "node-b"}, "unknown key(s) nodes"),
    ("node-b", "an arm is a dict"),
])
def test_a_bad_arm_is_refused_with_what_to_write(arm, needle):
    with pytest.raises(ArmError) as err:
        check_arms([arm], NODES)
    assert needle in str(err.value)
    assert "nothing was measured or changed" in str(err.value)


def test_every_problem_is_listed_at_once():
    with pytest.raises(ArmError) as err:
        check_arms([{"name": "dup", "node": "node-b", "replica": {"max_num_seqs": 2}},
                    {"name": "dup", "node": "node-b", "replica": {"kv_cache_dtype": "fp8"}},
                    {"name": "y", "node": "nowhere", "replica": {"max_num_seqs": 2}}], NODES)
    text = str(err.value)
    assert text.startswith("2 problem(s)")
    assert "[1] (dup): the name is used by an earlier arm" in text and "[2] (y): node 'nowhere'" in text


def test_no_arms_is_fine_and_a_non_list_is_not():
    assert check_arms([], NODES) == [] and check_arms(None, NODES) == []
    with pytest.raises(ArmError, match="must be a list"):
        check_arms({"name": "x"}, NODES)


def test_the_override_surface_is_the_profile_keys_and_env():
    assert set(ARM_REPLICA_KEYS) == (set(vllm_args.PROFILE_KEYS) - {"name", "base", "ab_arm"}) | {"env"}


def test_the_arm_profile_changes_only_what_the_arm_says_and_renders():
    profiles = {"agents": {"base": "text", "max_num_batched_tokens": 4096}, "text": {"max_model_len": 90000}}
    arm = arm_profile("agents", profiles, {"max_num_seqs": 2, "env": {"A": "1"}})
    assert arm == {"base": "text", "max_num_batched_tokens": 4096, "max_num_seqs": 2, "ab_arm": True}
    assert profiles["agents"] == {"base": "text", "max_num_batched_tokens": 4096}, "the inventory's profiles are not modified"
    baseline = vllm_args.render(dict(profiles["agents"], name="agents"), "0.27.1").argv
    armed = vllm_args.render(dict(arm, name="agents"), "0.27.1").argv
    assert set(baseline) ^ set(armed) == {"--max-num-seqs=8", "--max-num-seqs=2"}


def test_mtp_renders_only_as_an_arm():
    checkpoint = {"hybrid": True, "vision": True, "mtp": True, "native_context": 262144, "quantization": "nvfp4"}
    pair = {"memory_total_mib": 16376, "compute_capability": "12.0"}
    spec = {"speculative": {"method": "mtp", "num_speculative_tokens": 2}}
    with pytest.raises(vllm_args.VllmArgsError, match="only as an explicit A/B arm"):
        vllm_args.render(dict(spec, name="multimodal"), "0.25.1", checkpoint, pair)
    argv = vllm_args.render(dict(arm_profile("multimodal", {}, spec), name="multimodal"), "0.25.1",
                            checkpoint, pair).argv
    assert '--speculative-config={"method":"mtp","num_speculative_tokens":2}' in argv
