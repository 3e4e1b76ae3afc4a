"""The checkpoint role through ansible-playbook, against the local hub: pins, progress, facts, idempotence."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path

from checkpoint_helpers import repo_dir, snap, tree
from support.ansible_runner import run_playbook
from support.checkpoint_repo import COMMIT_A, LFS_FILES, REPO_ID, checkpoint_repo

PLAY = Path(__file__).with_name("role_play.yml")
INVENTORY = Path(__file__).with_name("inventory.yml")
FILES_A = checkpoint_repo().commits[COMMIT_A].files


def role_vars(hub, cache, **extra) -> dict:
    data = {"pairserve_checkpoint_revision": COMMIT_A, "pairserve_hf_endpoint": hub.endpoint,
            "pairserve_checkpoint_cache_dir": str(cache), "pairserve_checkpoint_reserve_free_space": 0,
            "pairserve_checkpoint_poll_interval": 1, "pairserve_node_python": sys.executable,
            "pairserve_gpu": {"pairs": [{"name": "pair0", "fp4_path": "native"},
                                        {"name": "pair1", "fp4_path": "marlin"}]}}
    data.update(extra)
    return data


def facts(result) -> dict:
    for record in reversed(result.results):
        found = record.get("ansible_facts", {}).get("pairserve_checkpoint")
        if found:
            return found
    raise AssertionError("no pairserve_checkpoint fact in the results")


def test_unset_revision_fails_before_anything_changes(fresh_hub, cache, hf_env):
    extra = role_vars(fresh_hub, cache)
    del extra["pairserve_checkpoint_revision"]
    result = run_playbook(PLAY, inventory=INVENTORY, extra_vars=extra, env=hf_env)
    assert result.rc != 0
    assert "pairserve_checkpoint_revision must be the 40-hex commit" in result.stdout
    assert "hf models info " + REPO_ID in result.stdout
    assert tree(cache) == [] and fresh_hub.requests == []


def test_role_downloads_patches_exports_and_is_idempotent(fresh_hub, cache, hf_env):
    hub = fresh_hub
    hub.stall(FILES_A[LFS_FILES[2]].sha256)

    def release_later():  # hold one shard long enough for a couple of progress lines below 100 %
        if hub.state.stall_started.wait(300):
            time.sleep(5)
        hub.release()

    releaser = threading.Thread(target=release_later, daemon=True)
    releaser.start()
    try:
        first = run_playbook(PLAY, inventory=INVENTORY, extra_vars=role_vars(hub, cache), env=hf_env, diff=True)
    finally:
        hub.release()
        releaser.join(310)
    assert first.rc == 0, first.stdout[-4000:] + first.stderr[-2000:]
    percents = [float(p) for p in re.findall(r"@%s: ([\d.]+)%% \(" % COMMIT_A[:12], first.stdout)]
    assert len(percents) >= 2 and percents[-1] == 100.0 and min(percents) < 100.0, percents

    fact = facts(first)
    export = repo_dir(cache) / "pairserve" / "export" / COMMIT_A
    assert fact["path"] == str(export) and fact["snapshot_path"] == str(snap(cache))
    # the export and the restart mark are hf_snapshot's paths (no rule of the role's own); the export changed, so
    # the mark is there until a restart removes it
    marker = repo_dir(cache) / "pairserve" / "restart-pending.json"
    assert fact["restart_marker"] == str(marker) and fact["restart_pending"] is True
    assert json.loads(marker.read_text())["path"] == str(export)
    assert (fact["repo"], fact["revision"]) == (REPO_ID, COMMIT_A)
    assert fact["architecture"] == "Qwen3_5ForConditionalGeneration" and fact["model_type"] == "qwen3_5"
    assert (fact["hybrid"], fact["vision"], fact["mtp"]) == (True, True, True)
    assert fact["quantization"] == "nvfp4" and fact["native_context"] == 262144
    assert fact["fp4_paths"] == ["native", "marlin"]
    assert (repo_dir(cache) / "refs" / "pairserve").read_text() == COMMIT_A
    # the export is self-contained: regular files, the patched tokenizer as patched
    exported = export / "tokenizer.json"
    assert not exported.is_symlink() and '"truncation": null' in exported.read_text()
    assert exported.stat().st_ino == (snap(cache) / "tokenizer.json").stat().st_ino
    shard = export / LFS_FILES[0]
    assert shard.stat().st_ino == (repo_dir(cache) / "blobs" / FILES_A[LFS_FILES[0]].sha256).stat().st_ino

    hub.reset_log()
    second = run_playbook(PLAY, inventory=INVENTORY, extra_vars=role_vars(hub, cache), env=hf_env)
    assert second.rc == 0, second.stdout[-3000:]
    changed = [r for r in second.results if r.get("changed")]
    assert changed == [], changed
    assert re.search(r"changed=0\s", second.stdout)
    assert hub.requests == [], "a complete checkpoint must not talk to the hub"

    check = run_playbook(PLAY, inventory=INVENTORY, extra_vars=role_vars(hub, cache), env=hf_env, check=True)
    assert check.rc == 0 and re.search(r"changed=0\s", check.stdout), check.stdout[-3000:]


def test_check_mode_on_an_empty_node_writes_nothing(fresh_hub, cache, hf_env):
    result = run_playbook(PLAY, inventory=INVENTORY, extra_vars=role_vars(fresh_hub, cache), env=hf_env, check=True)
    assert result.rc == 0, result.stdout[-3000:]
    assert tree(cache) == []
    # the paths are named all the same (hf_snapshot in check mode), for the plays after the role
    fact = facts(result)
    assert fact["path"] == str(repo_dir(cache) / "pairserve" / "export" / COMMIT_A)
    assert fact["restart_marker"] == str(repo_dir(cache) / "pairserve" / "restart-pending.json")
    assert fact["restart_pending"] is True  # the export would change
