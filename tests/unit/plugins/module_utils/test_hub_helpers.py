"""Local decisions of hf_snapshot: pattern matching like huggingface_hub's, checkpoint facts, the disk check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from huggingface_hub.utils import filter_repo_objects

# The collection resolves as ansible_collections.pairserve.llm through the link `make deps` creates.
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / ".cache" / "collections"))

from ansible_collections.pairserve.llm.plugins.module_utils import hub  # noqa: E402
from lab import checkpoint_repo  # noqa: E402

PATHS = ["config.json", "tokenizer.json", "model-00001-of-00003.safetensors", "vision/encoder.safetensors",
         "vision/config.json", "README.md", ".gitattributes"]


@pytest.mark.parametrize("allow,ignore", [
    (None, None), (["*.json"], None), (None, ["*.safetensors"]), (["vision/"], None), (["*.json"], ["vision/*"]),
    (["nothing*"], None),
])
def test_filter_matches_huggingface_hub(allow, ignore):
    ours = hub.filter_paths(PATHS, allow, ignore)
    theirs = sorted(filter_repo_objects(PATHS, allow_patterns=allow, ignore_patterns=ignore))
    assert ours == theirs


def test_describe_checkpoint_of_the_hybrid_vision_nvfp4_shape(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(checkpoint_repo.config()))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(checkpoint_repo.hf_quant_config()))
    facts = hub.describe_checkpoint(str(tmp_path))
    assert facts == {"architecture": "Qwen3_5ForConditionalGeneration", "model_type": "qwen3_5", "hybrid": True,
                     "quantization": "nvfp4", "vision": True, "mtp": True, "mtp_layers": 1,
                     "native_context": 262144}


def test_describe_checkpoint_of_a_plain_dense_text_model(tmp_path):
    # --mamba-cache-mode on a model without such layers boots and fails the first request: hybrid must be False
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "max_position_embeddings": 40960,
        "quantization_config": {"quant_method": "fp8"}}))
    facts = hub.describe_checkpoint(str(tmp_path))
    assert (facts["hybrid"], facts["vision"], facts["mtp"], facts["quantization"], facts["native_context"]) == \
        (False, False, False, "fp8", 40960)


@pytest.mark.parametrize("qcfg, want", [
    # llm-compressor's NVFP4 (as the GPU proof's tiny hybrid copy carries it): by its format, or by its groups
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}, "nvfp4"),
    ({"quant_method": "compressed-tensors", "format": "mixed", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}, "nvfp4"),
    # 4-bit integers (W4A16) and 8-bit floats stay what they are
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "group_size": 128}}}}, "compressed-tensors"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "group_size": None}}}}, "compressed-tensors"),
])
def test_a_compressed_tensors_checkpoint_says_whether_it_is_nvfp4(tmp_path, qcfg, want):
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "quantization_config": qcfg}))
    assert hub.describe_checkpoint(str(tmp_path))["quantization"] == want


def test_disk_check_names_the_input_and_the_fix(tmp_path):
    hub.check_disk(str(tmp_path / "new" / "cache"), 1024, 0)  # a not-yet-created cache dir is fine
    with pytest.raises(hub.HubError, match="pairserve_checkpoint_cache_dir"):
        hub.check_disk(str(tmp_path), 1024, 1 << 62)


def test_unpinned_advice_names_three_ways_to_find_the_commit():
    text = hub.how_to_find_commit("org/model")
    assert "hf models info org/model --revision main --expand sha" in text and "model_info('org/model'" in text
    assert "commit history" in text
