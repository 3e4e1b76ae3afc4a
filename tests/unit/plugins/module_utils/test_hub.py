"""Tests of module_utils/hub.py, the local decisions of hf_snapshot: pattern matching like huggingface_hub's,
checkpoint facts, the disk check, the cache layout and export, the listing, manifest and ref files, which wanted files
are present, blob verification against the listing's hashes, and the operator's messages."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import errors as hf_errors
from huggingface_hub.hf_api import RepoFile, RepoFolder
from huggingface_hub.utils import filter_repo_objects

from ansible_collections.pairserve.llm.plugins.module_utils import hub
from support import checkpoint_repo

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


# -- the listing, the manifest, the ref ---------------------------------------------------------------------------

SHA_HELLO = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"  # sha256 of b"hello\n"
GIT_HELLO = "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object` of b"hello\n"
GIT_EMPTY = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git's empty blob


def test_the_listing_keeps_files_with_their_lfs_sha256_and_skips_folders():
    tree = [RepoFile(path="model.safetensors", size=6, oid="f" * 40, lfs={"size": 6, "oid": SHA_HELLO, "pointerSize": 130}),
            RepoFile(path="config.json", size=0, oid=GIT_EMPTY), RepoFolder(path="vision", oid="d" * 40)]
    files = hub.listing_from_tree(tree)
    assert files == {"model.safetensors": {"size": 6, "blob_id": "f" * 40, "sha256": SHA_HELLO},
                     "config.json": {"size": 0, "blob_id": GIT_EMPTY, "sha256": None}}
    assert [hub.expected_blob_name(files[p]) for p in ("model.safetensors", "config.json")] == [SHA_HELLO, GIT_EMPTY]


def test_a_manifest_reads_back_only_for_its_own_repository_and_commit(tmp_path):
    files = {"config.json": {"size": 0, "blob_id": GIT_EMPTY, "sha256": None}}
    hub.write_manifest(str(tmp_path), "org/model", COMMIT, files, {GIT_EMPTY: [0, 1, 2]})
    path = Path(hub.manifest_path(str(tmp_path), "org/model", COMMIT))
    assert path == tmp_path / "models--org--model" / "pairserve" / ("snapshot-%s.json" % COMMIT)
    assert hub.read_manifest(str(tmp_path), "org/model", COMMIT) == {
        "format": 1, "repo_id": "org/model", "commit": COMMIT, "files": files, "verified": {GIT_EMPTY: [0, 1, 2]}}
    assert hub.read_manifest(str(tmp_path), "org/model", "b" * 40) is None  # no such file
    path.rename(path.with_name("snapshot-%s.json" % ("b" * 40)))
    assert hub.read_manifest(str(tmp_path), "org/model", "b" * 40) is None  # another commit's content
    path.with_name("snapshot-%s.json" % ("b" * 40)).write_text("{not json", encoding="utf-8")
    assert hub.read_manifest(str(tmp_path), "org/model", "b" * 40) is None


def test_the_ref_holds_the_commit_without_a_newline_and_check_mode_writes_nothing(tmp_path):
    ref = tmp_path / "models--org--model" / "refs" / "main"
    ref.parent.mkdir(parents=True)
    assert hub.write_ref(str(tmp_path), "org/model", "main", COMMIT, check_mode=True) == (None, COMMIT)
    assert not ref.exists()
    assert hub.write_ref(str(tmp_path), "org/model", "main", COMMIT, check_mode=False) == (None, COMMIT)
    assert ref.read_bytes() == COMMIT.encode()
    assert hub.write_ref(str(tmp_path), "org/model", "main", "b" * 40, check_mode=False) == (COMMIT, "b" * 40)


# -- what is on disk, and proof of it ---------------------------------------------------------------------------

def blob_cache(cache: Path, blobs: dict, snapshot: list) -> Path:
    """A repository folder with ``blobs`` {name: content} and snapshot entries ``snapshot`` linking to blob names."""
    folder = cache / "models--org--model"
    (folder / "blobs").mkdir(parents=True)
    (folder / "snapshots" / COMMIT).mkdir(parents=True)
    for name, data in blobs.items():
        (folder / "blobs" / name).write_bytes(data)
    for path, name in snapshot:
        (folder / "snapshots" / COMMIT / path).symlink_to(os.path.join("..", "..", "blobs", name))
    return folder


def test_the_digests_are_sha256_and_gits_blob_id(tmp_path):
    (tmp_path / "hello").write_bytes(b"hello\n")
    (tmp_path / "empty").write_bytes(b"")
    assert hub.file_digests(str(tmp_path / "hello")) == (SHA_HELLO, GIT_HELLO)
    assert hub.file_digests(str(tmp_path / "empty"))[1] == GIT_EMPTY


def test_a_file_is_present_when_its_blob_has_the_listed_size_and_its_snapshot_entry_resolves(tmp_path):
    files = {"a.bin": {"size": 6, "blob_id": "x", "sha256": SHA_HELLO},
             "short.bin": {"size": 100, "blob_id": "short", "sha256": None},
             "gone.bin": {"size": 40, "blob_id": "gone", "sha256": None},
             "unlinked.bin": {"size": 0, "blob_id": GIT_EMPTY, "sha256": None}}
    blob_cache(tmp_path, {SHA_HELLO: b"hello\n", "short": b"partial", GIT_EMPTY: b""},
               [("a.bin", SHA_HELLO), ("short.bin", "short"), ("gone.bin", "gone")])
    got = hub.local_status(str(tmp_path), "org/model", COMMIT, files, sorted(files))
    # a blob of the wrong size is missing but costs no new download bytes in the count; an absent blob does
    assert got == {"present": ["a.bin"], "missing": ["gone.bin", "short.bin", "unlinked.bin"], "missing_bytes": 40}


def test_blobs_are_checked_against_the_listing_and_hashed_again_only_when_they_change(tmp_path):
    files = {"model.safetensors": {"size": 6, "blob_id": "f" * 40, "sha256": SHA_HELLO},
             "config.json": {"size": 6, "blob_id": GIT_HELLO, "sha256": None},
             "bad.json": {"size": 6, "blob_id": GIT_EMPTY, "sha256": None}}
    folder = blob_cache(tmp_path, {SHA_HELLO: b"hello\n", GIT_HELLO: b"hello\n", GIT_EMPTY: b"hello\n"}, [])
    records, bad, hashed = hub.verify_blobs(str(tmp_path), "org/model", files, sorted(files), {})
    assert sorted(records) == sorted([SHA_HELLO, GIT_HELLO]) and hashed == 18
    assert bad == [{"path": "bad.json", "blob": str(folder / "blobs" / GIT_EMPTY), "expected": GIT_EMPTY,
                    "actual": GIT_HELLO}]
    good = ["model.safetensors", "config.json"]
    assert hub.verify_blobs(str(tmp_path), "org/model", files, good, records) == (records, [], 0)
    (folder / "blobs" / SHA_HELLO).write_bytes(b"HELLO\n")  # same size, new mtime: hashed again, and refused
    records2, bad, hashed = hub.verify_blobs(str(tmp_path), "org/model", files, good, records)
    assert list(records2) == [GIT_HELLO] and hashed == 6 and [b["path"] for b in bad] == ["model.safetensors"]


@pytest.mark.parametrize("num,text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536 * 1024, "1.5 MiB"),
                                      (3 * 1024 ** 3, "3.0 GiB"), (5 * 1024 ** 5, "5120.0 TiB")])
def test_human_bytes(num, text):
    assert hub.human_bytes(num) == text


def test_a_download_error_becomes_what_to_do():
    def status(code):  # the response huggingface_hub's HTTP errors carry (httpx2 is its HTTP client)
        return httpx2.Response(code, request=httpx2.Request("GET", "https://hf.co/api/models/org/m/revision/abc"))

    text = hub.explain(hf_errors.RevisionNotFoundError("404", response=status(404)), "org/m", "abc", "https://hf.co")
    assert text.startswith("Revision abc was not found in org/m on https://hf.co. Check pairserve_checkpoint_revision")
    assert "hf models info org/m --revision main --expand sha" in text
    text = hub.explain(hf_errors.GatedRepoError("403", response=status(403)), "org/m", "abc", "https://hf.co")
    assert text.startswith("Access to org/m on https://hf.co was refused (HTTP 403)") and "pairserve_hf_token" in text
    text = hub.explain(hf_errors.RepositoryNotFoundError("404", response=status(404)), "org/m", "abc", "https://hf.co")
    assert text.startswith("Repository org/m was not found on https://hf.co (HTTP 404). Check pairserve_checkpoint_repo")
    text = hub.explain(ConnectionRefusedError(111, "Connection refused"), "org/m", "abc", "https://mirror.lan")
    assert text.startswith("Cannot reach https://mirror.lan to download org/m: ConnectionRefusedError: ")
    assert hub.explain(KeyError("x"), "org/m", "abc", "https://hf.co") == \
        "Downloading org/m@abc from https://hf.co failed: KeyError: 'x'"
