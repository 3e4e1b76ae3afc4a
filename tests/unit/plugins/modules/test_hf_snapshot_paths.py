"""hf_snapshot names the checkpoint's paths itself (export, the collection's folder, the restart mark), in check
mode too, and they are the filter checkpoint_paths' paths. A cache whose manifest proves the snapshot complete:
no hub, no request (huggingface_hub is never imported on that path)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from support.ansible_runner import run_module

from ansible_collections.pairserve.llm.plugins.filter.checkpoint_paths import checkpoint_paths
from ansible_collections.pairserve.llm.plugins.module_utils import hub

REPO_ID = "pairserve-test/paths"
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
FILES = {"config.json": b'{"model_type": "qwen3"}', "model.safetensors": b"w" * 4096}


def complete_cache(cache: Path) -> None:
    listing = {}
    folder = Path(hub.repo_folder(str(cache), REPO_ID))
    for path, data in FILES.items():
        digest = hashlib.sha256(data).hexdigest()
        listing[path] = {"size": len(data), "blob_id": hashlib.sha1(data).hexdigest(), "sha256": digest}
        blob = folder / "blobs" / digest
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        entry = Path(hub.snapshot_dir(str(cache), REPO_ID, COMMIT)) / path
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.symlink_to(os.path.relpath(blob, entry.parent))
    hub.write_manifest(str(cache), REPO_ID, COMMIT, listing, {})


def tree(path: Path) -> list:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_paths_come_from_the_module_in_check_mode_and_match_the_filter(tmp_path):
    cache = tmp_path / "hf-cache"
    complete_cache(cache)
    before = tree(cache)
    args = {"repo_id": REPO_ID, "revision": COMMIT, "cache_dir": str(cache) + "/", "verify": False,
            "endpoint": "http://127.0.0.1:9"}  # never asked: the manifest proves the snapshot complete
    paths = checkpoint_paths(str(cache), REPO_ID, COMMIT)

    plain = run_module("hf_snapshot", args, check=True)
    assert not plain.failed, plain.stdout + plain.stderr
    assert not plain.changed and plain["requests_sent"] is False
    for key in ("snapshot_path", "export_path", "pairserve_dir", "restart_marker"):
        assert plain[key] == paths[key], key
    assert plain["path"] == paths["snapshot_path"]  # no export asked for

    check = run_module("hf_snapshot", dict(args, export=True), check=True, diff=True)
    assert not check.failed and check.changed, check.result
    assert check["path"] == check["export_path"] == paths["export_path"]
    assert check["restart_marker"] == paths["restart_marker"]
    assert check["diff"]["before"]["export_outdated"] == sorted(FILES)
    assert tree(cache) == before, "check mode wrote to the cache"

    apply = run_module("hf_snapshot", dict(args, export=True))
    assert not apply.failed and apply.changed, apply.result
    export = Path(apply["export_path"])
    assert sorted(p.name for p in export.iterdir()) == sorted(FILES)
    assert not Path(apply["restart_marker"]).exists(), "the module names the mark, the role writes it"

    again = run_module("hf_snapshot", dict(args, export=True), check=True)
    assert not again.failed and not again.changed, again.result
    again = run_module("hf_snapshot", dict(args, export=True))
    assert not again.failed and not again.changed, again.result


def test_export_dir_is_no_option_any_more(tmp_path):
    cache = tmp_path / "hf-cache"
    complete_cache(cache)
    result = run_module("hf_snapshot", {"repo_id": REPO_ID, "revision": COMMIT, "cache_dir": str(cache),
                                        "verify": False, "export_dir": str(tmp_path / "elsewhere")})
    assert result.failed and "export_dir" in result["msg"]
    assert not (tmp_path / "elsewhere").exists()
