"""The enumerated vLLM settings are checked against the pinned release's own vocabulary (the generated table), and the
validation play refuses a value outside it naming the host, the variable and the valid values.

The table itself is compared with the live parsers in tests/integration/vllm/test_vllm_vocabulary_live.py (the integration
tier builds the vLLM venvs; the unit tier runs before them in `make test`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import vllm_args as va
from ansible_collections.pairserve.llm.plugins.module_utils import vllm_vocabulary as vocab
from ansible_collections.pairserve.llm.plugins.module_utils.inventory_check import problems
from ansible_collections.pairserve.llm.plugins.module_utils.vllm_vocabulary_table import VOCABULARY
from support import inventory_views
from support.scripts import load

REPO = Path(__file__).resolve().parents[4]
generator = load(REPO / "scripts" / "vllm_vocabulary.py", "vllm_vocabulary_generator")

# The options a profile renders or an extra_args flag most often names: each must be in every release's table.
PROFILE_OPTIONS = ("kv_cache_dtype", "reasoning_parser", "tool_call_parser", "quantization", "dtype", "mamba_cache_mode")


def test_every_supported_release_has_a_vocabulary():
    assert vocab.versions() == list(va.SUPPORTED_VERSIONS)


@pytest.mark.parametrize("version", va.SUPPORTED_VERSIONS)
def test_the_table_holds_the_options_profiles_use(version):
    for dest in PROFILE_OPTIONS:
        assert vocab.choices(version, dest), (version, dest)
    # the seed's values are in it (the profiles render them on every release)
    for dest, value in (("kv_cache_dtype", "auto"), ("reasoning_parser", "qwen3"), ("tool_call_parser", "qwen3_coder"),
                        ("mamba_cache_mode", "align"), ("dtype", "bfloat16")):
        assert value in vocab.choices(version, dest)
    assert vocab.dest_of(version, "-q") == "quantization" and vocab.dest_of(version, "--kv-cache-dtype") == "kv_cache_dtype"


def test_the_table_records_what_changed_between_releases():
    # read from the releases, not written by hand: 0.32 dropped 'all', 0.32 added the qwen3_json tool parser
    assert "all" in vocab.choices("0.31.0", "mamba_cache_mode") and "all" not in vocab.choices("0.32.0", "mamba_cache_mode")
    assert "qwen3_json" not in vocab.choices("0.31.0", "tool_call_parser")
    assert "qwen3_json" in vocab.choices("0.32.0", "tool_call_parser")
    assert va.PARSERS["0.25.1"]["tool"] == frozenset(vocab.choices("0.25.1", "tool_call_parser"))


def test_the_committed_table_is_what_the_generator_writes():
    """The module is the generator's output (nobody edited a value by hand): re-render it from its own data."""
    text = (REPO / "plugins" / "module_utils" / "vllm_vocabulary_table.py").read_text()
    sources = dict(re.findall(r"(?m)^  (\d+\.\d+\.\d+): (.+)$", text))
    assert sorted(sources) == sorted(VOCABULARY)
    assert generator.render_table(VOCABULARY, sources) == text


@pytest.mark.parametrize("setting,value,valid", [
    ({"kv_cache_dtype": "fp9"}, "fp9", "fp8_e4m3"),
    ({"kv_cache_dtype": "FP8"}, "FP8", "fp8"),
    ({"extra_args": ["--dtype=bf16"]}, "bf16", "bfloat16"),
    ({"extra_args": ["-q", "nvfp5"]}, "nvfp5", "modelopt_fp4"),
    ({"extra_args": ["--quantization", "fp4"]}, "fp4", "compressed-tensors"),
    ({"extra_args": ["--scheduling-policy=lifo"]}, "lifo", "priority"),
])
def test_a_value_outside_the_release_is_refused_naming_it_and_the_valid_values(setting, value, valid):
    with pytest.raises(va.VllmArgsError) as err:
        va.render(dict(setting, name="custom", base="text"), "0.25.1", va.ANY_CHECKPOINT)
    message = str(err.value)
    assert "%r is not a value vLLM 0.25.1 accepts" % value in message
    assert re.search(r"valid: [^)]*\b%s\b" % re.escape(valid), message), message


def test_values_of_the_release_render():
    argv = va.render({"name": "custom", "base": "text", "kv_cache_dtype": "fp8_e4m3",
                      "extra_args": ["--dtype", "bfloat16", "-q=modelopt_fp4", "--seed=3"]}, "0.25.1", va.ANY_CHECKPOINT).argv
    assert "--kv-cache-dtype=fp8_e4m3" in argv and argv[-4:] == ["--dtype", "bfloat16", "-q=modelopt_fp4", "--seed=3"]


def test_a_value_is_judged_by_the_pinned_release():
    # nvfp4 KV cache: the same profile is fine on one release and refused on another when the table says so
    pinned = [v for v in va.SUPPORTED_VERSIONS if "turboquant_k8v4" in vocab.choices(v, "kv_cache_dtype")]
    missing = [v for v in va.SUPPORTED_VERSIONS if v not in pinned]
    profile = {"name": "custom", "base": "text", "kv_cache_dtype": "turboquant_k8v4"}
    for version in pinned:
        va.render(profile, version, va.ANY_CHECKPOINT)
    for version in missing:
        with pytest.raises(va.VllmArgsError, match="vLLM %s accepts" % re.escape(version)):
            va.render(profile, version, va.ANY_CHECKPOINT)


def test_a_parser_refusal_lists_the_release_parsers():
    with pytest.raises(va.VllmArgsError) as err:
        va.render({"name": "custom", "base": "text", "reasoning_parser": "qwen4"}, "0.25.1")
    assert "reasoning_parser 'qwen4' is not registered in vLLM 0.25.1" in str(err.value)
    for name in vocab.choices("0.25.1", "reasoning_parser"):
        assert name in str(err.value)


def test_the_validation_play_names_host_variable_and_valid_values():
    found = problems(inventory_views.views(
        node_a={"pairserve_replica_profile": "agents",
                "pairserve_profiles": {"agents": {"base": "text", "extra_args": ["--dtype=bf16"]}}},
        node_b={"pairserve_replica_profile": "agents",
                "pairserve_profiles": {"agents": {"base": "text", "kv_cache_dtype": "fp9"}}}),
        inventory_views.GROUPS, inventory_views.CONSTRAINTS)
    texts = dict(((p["host"], p["variable"]), p["problem"]) for p in found)
    assert "kv_cache_dtype 'fp9' is not a value vLLM" in texts[("node-b", "pairserve_profiles")]
    assert "fp8_e4m3" in texts[("node-b", "pairserve_profiles")]
    assert "extra_args --dtype 'bf16'" in texts[("node-a", "pairserve_profiles")]
    assert "bfloat16" in texts[("node-a", "pairserve_profiles")]
