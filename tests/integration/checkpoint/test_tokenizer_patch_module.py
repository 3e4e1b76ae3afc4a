"""pairserve.llm.tokenizer_patch on a real huggingface_hub snapshot: blobs stay pristine, patch is surgical."""

from __future__ import annotations

import difflib
import json
import os

from checkpoint_helpers import sha256, snap, snapshot_args
from support.ansible_runner import run_module
from support.checkpoint_repo import COMMIT_A, COMMIT_B, checkpoint_repo

FILES_A = checkpoint_repo().commits[COMMIT_A].files


def test_patch_four_steps_blob_untouched_rerun_delete_restore(fresh_hub, cache, hf_env):
    assert not run_module("hf_snapshot", snapshot_args(fresh_hub, cache), env=hf_env).failed
    assert not run_module("hf_snapshot", snapshot_args(fresh_hub, cache, revision=COMMIT_B), env=hf_env).failed
    entry = snap(cache) / "tokenizer.json"
    link = os.readlink(entry)
    blob = (entry.parent / link).resolve()
    other = snap(cache, COMMIT_B) / "tokenizer.json"
    assert other.resolve() == blob, "the two snapshots should share the tokenizer blob (test is vacuous)"
    pristine = sha256(blob)
    args = {"path": str(snap(cache))}

    check = run_module("tokenizer_patch", args, check=True, diff=True, env=hf_env)
    assert not check.failed and check.changed, check.stdout + check.stderr
    assert entry.is_symlink() and sha256(blob) == pristine, "check mode wrote"
    # diff mode: only truncation lines change
    diffs = {d["before_header"].split()[0]: d for d in check["diff"]}
    for name, d in diffs.items():
        lines = [l for l in difflib.unified_diff(d["before"].splitlines(), d["after"].splitlines(), lineterm="", n=0)
                 if l[:1] in "+-" and not l.startswith(("---", "+++"))]
        assert lines, name
        assert all(any(k in l for k in ("truncation", "max_length", "direction", "strategy", "stride"))
                   or l.strip() in ("-  },",) for l in lines), (name, lines)

    apply = run_module("tokenizer_patch", args, diff=True, env=hf_env)
    assert not apply.failed and apply.changed
    assert not entry.is_symlink() and json.loads(entry.read_text())["truncation"] is None
    assert json.loads(entry.read_text())["model"]["vocab"]["truncation"] == 2
    assert sha256(blob) == pristine and other.is_symlink() and json.loads(other.read_text())["truncation"]
    config = json.loads((snap(cache) / "tokenizer_config.json").read_text())
    assert "max_length" not in config and "truncation" not in config and config["model_max_length"] == 262144
    assert apply["files"]["tokenizer.json"]["changes"]["truncation"]["max_length"] == 2048

    again_check = run_module("tokenizer_patch", args, check=True, diff=True, env=hf_env)
    assert not again_check.failed and not again_check.changed
    again = run_module("tokenizer_patch", args, env=hf_env)
    assert not again.failed and not again.changed

    # the patch survives a rerun of hf_snapshot (complete snapshot: nothing is touched)
    rerun = run_module("hf_snapshot", snapshot_args(fresh_hub, cache), env=hf_env)
    assert not rerun.failed and not rerun.changed and not entry.is_symlink()

    # a deleted file comes back as the pristine link; the patch is applied again
    entry.unlink()
    relink = run_module("hf_snapshot", snapshot_args(fresh_hub, cache), env=hf_env)
    assert not relink.failed and relink.changed and entry.is_symlink()
    repatch = run_module("tokenizer_patch", args, env=hf_env)
    assert repatch.changed and repatch["files"]["tokenizer.json"]["action"] == "patched"
    assert repatch["files"]["tokenizer_config.json"]["action"] == "unchanged"
    assert sha256(blob) == pristine

    # state: restored puts the original link back, in four steps too
    restore = dict(args, state="restored")
    r_check = run_module("tokenizer_patch", restore, check=True, env=hf_env)
    assert r_check.changed and not entry.is_symlink()
    r_apply = run_module("tokenizer_patch", restore, env=hf_env)
    assert r_apply.changed and entry.is_symlink() and os.readlink(entry) == link
    assert (snap(cache) / "tokenizer_config.json").is_symlink()
    assert entry.read_bytes() == FILES_A["tokenizer.json"].data
    assert not run_module("tokenizer_patch", restore, check=True, env=hf_env).changed
    assert not run_module("tokenizer_patch", restore, env=hf_env).changed


def test_bad_path_is_refused(tmp_path, hf_env):
    missing = run_module("tokenizer_patch", {"path": str(tmp_path / "nope")}, env=hf_env)
    assert missing.failed and "not a directory" in missing["msg"]
    empty = run_module("tokenizer_patch", {"path": str(tmp_path)}, env=hf_env)
    assert empty.failed and "has none of tokenizer.json" in empty["msg"]
