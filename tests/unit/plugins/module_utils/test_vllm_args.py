"""vLLM argument rendering: golden argv of the seed's profiles, every version rule, every guard rail.

Pure functions, so these call plugins/module_utils/vllm_args.py directly; the filter is exercised through
real ansible-playbook in test_vllm_args_filter.py, and the argv is parsed by real vLLM parsers in
tests/integration/vllm/test_vllm_parsers.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import vllm_args as va
from lab import pins
from lab.profile import lab_profile

REPO = Path(__file__).resolve().parents[4]

# The vLLM the lab pins (lab/inventory/group_vars/all/pins.yml): what the guard rails and the lab profile are checked
# on. The seed's goldens and the per-release rules below name their releases: they are facts about those releases.
PINNED = pins.VLLM

# The seed's checkpoint (Qwen3.8 27B NVFP4): hybrid attention, vision tower, MTP head, long native context.
SEED_CHECKPOINT = {
    "architecture": "Qwen3_5ForConditionalGeneration",
    "model_type": "qwen3_5",
    "hybrid": True,
    "vision": True,
    "mtp": True,
    "native_context": 262144,
    "quantization": "nvfp4",
}
PAIR_5080 = {"memory_total_mib": 16303, "compute_capability": "12.0", "fp4_path": "native"}
PAIR_4070 = {"memory_total_mib": 16376, "compute_capability": "8.9", "fp4_path": "marlin"}
TINY = {"architecture": "Qwen3ForCausalLM", "model_type": "qwen3", "hybrid": False, "vision": False, "mtp": False,
        "native_context": 8192, "quantization": None}

# The seed's "configuration I kept", flag by flag (multimodal profile).
SEED_MULTIMODAL = [
    ("--tensor-parallel-size", "2"),
    ("--max-model-len", "65536"),
    ("--gpu-memory-utilization", "0.92"),
    ("--kv-cache-dtype", "auto"),
    ("--max-num-seqs", "8"),
    ("--max-num-batched-tokens", "8192"),
    ("--reasoning-parser", "qwen3"),
    ("--enable-auto-tool-choice", None),
    ("--tool-call-parser", "qwen3_coder"),
    ("--enable-prefix-caching", None),
    ("--mamba-cache-mode", "align"),
    ("--trust-remote-code", None),
    ("--override-generation-config", '{"temperature":1.0,"top_p":0.95,"top_k":20}'),
]
# Text profile: vision tower removed, 98,304-token window; everything else as kept.
SEED_TEXT = [(f, "98304" if f == "--max-model-len" else v) for f, v in SEED_MULTIMODAL]
SEED_TEXT.insert(2, ("--language-model-only", None))


def render(profile="multimodal", version=PINNED, checkpoint=None, pair=None, **kw):
    return va.render(profile, version, SEED_CHECKPOINT if checkpoint is None else checkpoint, PAIR_5080 if pair is None else pair, **kw)


def flags(rendered):
    return [pair[0] for pair in va.argv_pairs(rendered.argv)]


# ---------------------------------------------------------------------------------------------- goldens
@pytest.mark.parametrize("profile,pair,golden", [
    ("multimodal", PAIR_5080, SEED_MULTIMODAL),
    ("text", PAIR_4070, SEED_TEXT),
], ids=["multimodal-5080", "text-4070"])
def test_seed_profiles_reproduce_the_seed_flags_on_0251(profile, pair, golden):
    rendered = render(profile, "0.25.1", pair=pair)
    assert va.argv_pairs(rendered.argv) == golden
    assert rendered.warnings == []


def test_equals_style_is_one_element_per_flag_for_gpustack():
    argv = render("multimodal").argv
    assert argv[:3] == ["--tensor-parallel-size=2", "--max-model-len=65536", "--gpu-memory-utilization=0.92"]
    assert argv[-1] == '--override-generation-config={"temperature":1.0,"top_p":0.95,"top_k":20}'
    assert all(a.startswith("--") for a in argv)


def test_split_style_is_a_command_line():
    argv = render("multimodal", style="split").argv
    assert argv[:4] == ["--tensor-parallel-size", "2", "--max-model-len", "65536"]
    assert va.argv_pairs(argv) == SEED_MULTIMODAL


def test_lab_profile_fits_the_cpu_backend():
    # The lab inventory's own profile (an ordinary user profile, not a built-in one).
    assert "lab" not in va.BUILTIN_PROFILES
    rendered = va.render(lab_profile(), PINNED, TINY, {})
    pairs = dict(va.argv_pairs(rendered.argv))
    assert pairs["--kv-cache-memory-bytes"] == "64M"
    assert "--enforce-eager" in pairs
    assert "--gpu-memory-utilization" not in pairs  # a share of host RAM on CPU: 0.92 cannot run in tests
    assert pairs["--tensor-parallel-size"] == "1"
    assert int(pairs["--max-model-len"]) <= TINY["native_context"]
    assert "--mamba-cache-mode" not in pairs and "--language-model-only" not in pairs
    assert rendered.warnings == []


def test_profile_dict_overrides_its_base_key_by_key():
    rendered = render({"name": "agents", "base": "text", "max_model_len": 49152, "kv_cache_dtype": "fp8"})
    pairs = dict(va.argv_pairs(rendered.argv))
    assert pairs["--max-model-len"] == "49152" and pairs["--kv-cache-dtype"] == "fp8"
    assert "--language-model-only" in pairs
    assert rendered.profile["name"] == "agents" and rendered.profile["base"] == "text"


def test_a_defined_profile_renders_and_an_undefined_one_is_never_multimodal():
    # With settings or a base a user profile is defined; the same name bare is refused, not served as multimodal.
    assert dict(va.argv_pairs(render({"name": "agents", "max_num_seqs": 4}).argv))["--max-num-seqs"] == "4"
    assert render({"name": "agents", "base": "text"}).argv == render("text").argv
    assert render({"base": "text"}).argv == render("text").argv
    with pytest.raises(va.VllmArgsError, match="'agents' is neither"):
        render({"name": "agents"})


def test_extra_args_are_appended_after_the_profile_flags():
    rendered = render({"name": "multimodal", "extra_args": ["--disable-custom-all-reduce"]})
    assert rendered.argv[-1] == "--disable-custom-all-reduce"


# -------------------------------------------------------------------------------------- version rules
@pytest.mark.parametrize("version,hybrid,expected", [
    ("0.25.1", True, "align"),
    ("0.31.0", True, "align"),
    ("0.32.0", True, "align"),
    ("0.33.0", True, None),    # deprecated, no effect from 0.33: not rendered
    ("0.25.1", False, None),   # plain transformer: /health 200, then HTTP 500 on the first completion
    ("0.27.1", False, None),
])
def test_mamba_cache_mode_only_for_hybrid_models_before_033(version, hybrid, expected):
    rendered = render("multimodal", version, checkpoint=dict(SEED_CHECKPOINT, hybrid=hybrid))
    assert dict(va.argv_pairs(rendered.argv)).get("--mamba-cache-mode") == expected


@pytest.mark.parametrize("version,accepted", [("0.25.1", True), ("0.31.0", True), ("0.32.0", False), ("0.33.0", False)])
def test_mamba_cache_mode_all_is_rejected_from_032(version, accepted):
    profile = {"name": "multimodal", "mamba_cache_mode": "all"}
    if accepted:
        assert dict(va.argv_pairs(render(profile, version).argv))["--mamba-cache-mode"] == "all"
    else:
        with pytest.raises(va.VllmArgsError, match="'all' was removed in 0.32"):
            render(profile, version)


@pytest.mark.parametrize("version", va.SUPPORTED_VERSIONS)
def test_negative_booleans_are_no_enable_in_every_version(version):
    argv = render({"name": "multimodal", "enable_prefix_caching": False}, version).argv
    assert "--no-enable-prefix-caching" in argv
    assert not any(a.startswith("--disable-prefix-caching") or a == "--enable-prefix-caching" for a in argv)


@pytest.mark.parametrize("version,ok", [("0.25.1", False), ("0.32.0", False), ("0.33.0", True)])
def test_disable_spelling_in_extra_args_refused_before_033(version, ok):
    profile = {"name": "multimodal", "extra_args": ["--disable-chunked-prefill"]}
    if ok:
        assert render(profile, version).argv[-1] == "--disable-chunked-prefill"
    else:
        with pytest.raises(va.VllmArgsError, match="use --no-enable-chunked-prefill"):
            render(profile, version)


@pytest.mark.parametrize("version", va.SUPPORTED_VERSIONS)
def test_seed_parsers_exist_in_every_supported_version(version):
    assert {"qwen3"} <= va.PARSERS[version]["reasoning"]
    assert {"qwen3_coder", "qwen3_xml", "hermes"} <= va.PARSERS[version]["tool"]


@pytest.mark.parametrize("key,name,version,ok", [
    ("tool_call_parser", "qwen3_json", "0.31.0", False),  # added in 0.32
    ("tool_call_parser", "qwen3_json", "0.32.0", True),
    ("reasoning_parser", "kimi_k3", "0.25.1", False),     # added in 0.27.1
    ("reasoning_parser", "kimi_k3", "0.27.1", True),
    ("reasoning_parser", "qwen3_coder", "0.25.1", False),  # a tool parser is not a reasoning parser
    ("tool_call_parser", "qwen3-coder", "0.25.1", False),  # typo
])
def test_parser_names_are_checked_against_the_pinned_version(key, name, version, ok):
    profile = {"name": "multimodal", key: name}
    if ok:
        assert name in va.argv_pairs(render(profile, version).argv)[6 if key == "reasoning_parser" else 8]
    else:
        with pytest.raises(va.VllmArgsError, match="is not registered in vLLM %s" % version.replace(".", r"\.")):
            render(profile, version)


def test_parser_error_suggests_similar_names():
    with pytest.raises(va.VllmArgsError, match="similar: qwen3_coder, qwen3_xml"):
        render({"name": "multimodal", "tool_call_parser": "qwen3_code"})


@pytest.mark.parametrize("version", ["0.26.0", "0.34.0", "v0.25.1", "", None, "latest"])
def test_unsupported_versions_are_refused_with_the_list(version):
    with pytest.raises(va.VllmArgsError, match="supported: 0.25.1, 0.27.1"):
        render("multimodal", version)


# ---------------------------------------------------------------------------------------- guard rails
REFUSED = [
    # (id, profile, checkpoint, pair, version, message fragment that carries the seed's reason)
    ("pipeline-parallel", {"name": "text", "pipeline_parallel_size": 2}, None, None, PINNED, "248K-vocabulary embedding and lm_head"),
    ("gpu-mem-0.96", {"name": "multimodal", "gpu_memory_utilization": 0.96}, None, None, PINNED, "died when an ordinary request needed a 34 MiB"),
    ("gpu-mem-1.5", {"name": "multimodal", "gpu_memory_utilization": 1.5}, None, None, PINNED, r"number in \(0, 1\]"),
    ("gpu-mem-0", {"name": "multimodal", "gpu_memory_utilization": 0}, None, None, PINNED, r"number in \(0, 1\]"),
    ("context-over-native", {"name": "text", "max_model_len": 300000}, None, None, PINNED, "longer than the checkpoint's native context 262144"),
    ("lab-over-native", lab_profile(), dict(TINY, native_context=2048), None, PINNED, "native context 2048"),
    ("mtp-without-ab-arm", {"name": "multimodal", "speculative": {"method": "mtp", "num_speculative_tokens": 2}}, None, None, PINNED,
     "4.6x slower"),
    ("mtp-without-head", {"name": "multimodal", "ab_arm": True, "speculative": {"method": "mtp", "num_speculative_tokens": 2}},
     dict(SEED_CHECKPOINT, mtp=False), None, PINNED, "Unsupported speculative method"),
    ("mtp-deprecated-alias", {"name": "multimodal", "ab_arm": True, "speculative": {"method": "qwen3_next_mtp", "num_speculative_tokens": 2}},
     None, None, PINNED, "deprecated aliases of mtp"),
    ("mtp-zero-tokens", {"name": "multimodal", "ab_arm": True, "speculative": {"method": "mtp", "num_speculative_tokens": 0}},
     None, None, PINNED, "integer >= 1"),
    ("nvfp4-no-fp4-path", "text", None, {"compute_capability": "7.5", "fp4_path": "unsupported"}, PINNED, "has none: NVFP4 runs natively on Blackwell"),
    ("nvfp4-derived-unsupported", "text", None, {"compute_capability": "7.0"}, PINNED, "compute capability 7.0"),
    ("vision-on-text-checkpoint", "multimodal", dict(SEED_CHECKPOINT, vision=False), None, PINNED, "has no vision tower"),
    ("unknown-key", {"name": "text", "max_model_length": 1000}, None, None, PINNED, "unknown key"),
    ("unknown-base", {"name": "x", "base": "huge"}, None, None, PINNED, "is not a built-in profile"),
    ("unknown-name", "multimodel", None, None, PINNED, r"'multimodel' is neither a built-in profile \(multimodal"),
    ("undefined-name-dict", {"name": "agents"}, None, None, PINNED, "define it in pairserve_profiles"),
    ("undefined-name-no-base", {"name": "agents", "base": None}, None, None, PINNED, "no settings and no base"),
    ("max-num-seqs-0", {"name": "text", "max_num_seqs": 0}, None, None, PINNED, "max_num_seqs must be an integer >= 1"),
    ("tp-string", {"name": "text", "tensor_parallel_size": "2"}, None, None, PINNED, "tensor_parallel_size must be an integer"),
    ("bool-as-string", {"name": "text", "trust_remote_code": "yes"}, None, None, PINNED, "must be true or false"),
    ("no-memory-budget", lab_profile(kv_cache_memory_bytes=None), TINY, None, PINNED, "set gpu_memory_utilization"),
    ("bad-kv-bytes", lab_profile(kv_cache_memory_bytes="lots"), TINY, None, PINNED, "K/M/G suffix"),
    ("extra-owns-flag", {"name": "text", "extra_args": ["--max-model-len=1000"]}, None, None, PINNED, "set the profile key max_model_len"),
    ("extra-pp", {"name": "text", "extra_args": ["-pp", "2"]}, None, None, PINNED, "sets a flag the profile owns"),
    ("auto-tools-without-parser", {"name": "text", "tool_call_parser": None}, None, None, PINNED, "needs tool_call_parser"),
    ("bad-generation-config", {"name": "text", "override_generation_config": "temperature=1"}, None, None, PINNED, "must be a mapping"),
    # The seed: 0.95 booted with ~10 MiB free on 2x16 GiB and died on a 34 MiB activation. Refused on such cards
    # unless the profile accepts it; a string is not an acknowledgement.
    ("gpu-mem-0.95-16gib", {"name": "multimodal", "gpu_memory_utilization": 0.95}, None, PAIR_5080, PINNED,
     "refused on a pair of 16303 MiB cards.*accept_gpu_memory_above_092"),
    ("gpu-mem-0.93-16gib", {"name": "text", "gpu_memory_utilization": 0.93}, None, PAIR_4070, PINNED, "0.92 stayed up"),
    ("gpu-mem-ack-as-string", {"name": "multimodal", "gpu_memory_utilization": 0.95,
                               "accept_gpu_memory_above_092": "yes"}, None, PAIR_5080, PINNED, "must be true or false"),
]


@pytest.mark.parametrize("profile,checkpoint,pair,version,message", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_guard_rails_refuse_with_the_reason(profile, checkpoint, pair, version, message):
    with pytest.raises(va.VllmArgsError, match=message):
        render(profile, version, checkpoint=checkpoint, pair=pair)


WARNED = [
    ("gpu-mem-0.94-accepted", {"name": "multimodal", "gpu_memory_utilization": 0.94, "accept_gpu_memory_above_092": True},
     PAIR_5080, "booted with ~10 MiB free and died on a 34 MiB"),
    ("gpu-mem-0.95-accepted", {"name": "multimodal", "gpu_memory_utilization": 0.95, "accept_gpu_memory_above_092": True},
     PAIR_5080, "above 0.92"),
    # On larger cards the seed's 16 GiB story does not apply: warned, not refused.
    ("gpu-mem-0.95-large-cards", {"name": "multimodal", "gpu_memory_utilization": 0.95},
     {"memory_total_mib": 143771, "compute_capability": "9.0", "fp4_path": "marlin"}, "above 0.92"),
    ("gpu-mem-0.90-16gib", {"name": "multimodal", "gpu_memory_utilization": 0.90}, PAIR_4070, "missed the seed's KV-cache check by 20 MiB"),
    ("max-num-seqs-1", {"name": "text", "max_num_seqs": 1}, PAIR_4070, "4x"),
    ("text-131072-on-16gib", {"name": "text", "max_model_len": 131072}, PAIR_4070, "131072 did not boot"),
    ("mtp-ab-arm", {"name": "multimodal", "ab_arm": True, "speculative": {"method": "mtp", "num_speculative_tokens": 3}}, PAIR_5080,
     "MTP made decode 4.6x slower"),
]


@pytest.mark.parametrize("profile,pair,message", [r[1:] for r in WARNED], ids=[r[0] for r in WARNED])
def test_warnings_render_but_say_why(profile, pair, message):
    rendered = render(profile, pair=pair)
    assert len(rendered.warnings) == 1
    assert message in rendered.warnings[0]
    assert rendered.argv  # a warning never blocks rendering


def test_gpu_memory_0_90_on_a_large_pair_is_not_warned():
    rendered = render({"name": "multimodal", "gpu_memory_utilization": 0.90}, pair={"memory_total_mib": 143771, "compute_capability": "9.0"})
    assert rendered.warnings == []


def test_mtp_ab_arm_renders_the_speculative_config():
    rendered = render({"name": "multimodal", "ab_arm": True, "speculative": {"method": "mtp", "num_speculative_tokens": 3}})
    assert va.argv_pairs(rendered.argv)[-1] == ("--speculative-config", '{"method":"mtp","num_speculative_tokens":3}')


@pytest.mark.parametrize("capability,path", [("12.0", "native"), ("10.0", "native"), ("8.9", "marlin"), ("8.0", "marlin"), ("7.5", "unsupported")])
def test_fp4_path_derived_from_compute_capability(capability, path):
    assert va._fp4_path({"compute_capability": capability}) == path  # pylint: disable=protected-access
    if path == "unsupported":
        with pytest.raises(va.VllmArgsError):
            render("text", pair={"compute_capability": capability})
    else:
        assert render("text", pair={"compute_capability": capability}).argv


@pytest.mark.parametrize("capability", ["12", "sm_120", [12, 0]])
def test_malformed_compute_capability_is_an_input_error(capability):
    with pytest.raises(va.VllmArgsError, match="compute_capability must look like 12.0"):
        render("text", pair={"compute_capability": capability})


def test_fp4_path_is_irrelevant_for_a_bf16_checkpoint():
    assert render("text", checkpoint=dict(SEED_CHECKPOINT, quantization=None), pair={"fp4_path": "unsupported"}).argv


def test_text_profile_on_text_only_checkpoint_needs_no_language_model_only():
    rendered = render("text", checkpoint=dict(SEED_CHECKPOINT, vision=False))
    assert "--language-model-only" not in flags(rendered)


def test_rendering_does_not_mutate_inputs():
    profile = {"name": "text", "extra_args": ["--disable-custom-all-reduce"]}
    checkpoint = dict(SEED_CHECKPOINT)
    before = (repr(profile), repr(checkpoint), repr(va.PROFILE_DEFAULTS), repr(va.BUILTIN_PROFILES))
    render(profile, checkpoint=checkpoint)
    render(profile, checkpoint=checkpoint)
    assert before == (repr(profile), repr(checkpoint), repr(va.PROFILE_DEFAULTS), repr(va.BUILTIN_PROFILES))
