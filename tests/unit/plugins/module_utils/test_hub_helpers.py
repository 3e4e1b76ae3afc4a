"""Local decisions of hf_snapshot: pattern matching like huggingface_hub's, checkpoint facts, the disk check."""

from __future__ import annotations

import json
import os
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


# -- the layout of one checkpoint: one owner --------------------------------------------------------------------

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_checkpoint_paths_name_the_whole_layout():
    paths = hub.checkpoint_paths("/var/lib/pairserve/hf-cache", "org/model-X", COMMIT)
    folder = "/var/lib/pairserve/hf-cache/models--org--model-X"
    assert paths == {
        "repo_folder": folder,
        "snapshot_path": folder + "/snapshots/" + COMMIT,
        "pairserve_dir": folder + "/pairserve",
        "export_path": folder + "/pairserve/export/" + COMMIT,
        "restart_marker": folder + "/pairserve/restart-pending.json",
    }
    # the helpers the module and partial_downloads use are the same rule
    assert paths["repo_folder"] == hub.repo_folder("/var/lib/pairserve/hf-cache", "org/model-X")
    assert paths["pairserve_dir"] == hub.state_dir("/var/lib/pairserve/hf-cache", "org/model-X")
    assert paths["export_path"] == hub.export_dir("/var/lib/pairserve/hf-cache", "org/model-X", COMMIT)
    assert paths["restart_marker"] == hub.restart_marker_path("/var/lib/pairserve/hf-cache", "org/model-X")


def fake_snapshot(cache: Path, repo_id: str, files: dict) -> None:
    """A cache as huggingface_hub leaves it: blobs, and snapshot entries that are relative links into them."""
    folder = Path(hub.repo_folder(str(cache), repo_id))
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        blob = folder / "blobs" / ("blob-" + path.replace("/", "-"))
        blob.write_bytes(data)
        entry = Path(hub.snapshot_dir(str(cache), repo_id, COMMIT)) / path
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.symlink_to(os.path.relpath(blob, entry.parent))


def test_sync_export_links_into_the_export_of_the_layout(tmp_path):
    fake_snapshot(tmp_path, "org/model", {"config.json": b"{}", "vision/a.safetensors": b"x" * 10})
    wanted = ["config.json", "vision/a.safetensors"]
    export = Path(hub.export_dir(str(tmp_path), "org/model", COMMIT))

    assert sorted(hub.sync_export(str(tmp_path), "org/model", COMMIT, wanted, check_mode=True)) == wanted
    assert not export.exists(), "check mode wrote the export"

    assert sorted(hub.sync_export(str(tmp_path), "org/model", COMMIT, wanted, check_mode=False)) == wanted
    snap = Path(hub.snapshot_dir(str(tmp_path), "org/model", COMMIT))
    for path in wanted:
        assert not (export / path).is_symlink()
        assert (export / path).stat().st_ino == (snap / path).resolve().stat().st_ino
    assert hub.sync_export(str(tmp_path), "org/model", COMMIT, wanted, check_mode=False) == []

    (export / "stale.bin").write_bytes(b"old")  # not in the selection: removed
    assert hub.sync_export(str(tmp_path), "org/model", COMMIT, wanted, check_mode=False) == ["stale.bin"]
    assert not (export / "stale.bin").exists()
