"""pairserve.llm.hf_snapshot through real Ansible, the real huggingface_hub client and a local hub."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from checkpoint_helpers import BIG_REPO, PRIVATE_REPO, PRIVATE_TOKEN, repo_dir, snap, snapshot_args, tree
from support import ansible_runner
from support.ansible_runner import run_module
from support.checkpoint_repo import COMMIT_A, COMMIT_B, LFS_FILES, checkpoint_repo

REPO = checkpoint_repo()
FILES_A = REPO.commits[COMMIT_A].files


def test_pinned_fetch_four_steps_and_zero_request_rerun(fresh_hub, cache, hf_env):
    hub = fresh_hub
    args = snapshot_args(hub, cache, ref_name="pairserve")

    check = run_module("hf_snapshot", args, check=True, diff=True, env=hf_env)
    assert not check.failed, check.stdout + check.stderr
    assert check.changed
    assert sorted(check["fetched"]) == sorted(FILES_A)
    assert check["bytes_fetched"] == sum(f.size for f in FILES_A.values())
    assert len(hub.requests) == 1, hub.requests  # one listing, nothing else
    assert tree(cache) == [], "check mode wrote to the cache"
    assert check["diff"]["before"]["files_present"] == [] and check["diff"]["before"]["ref"] is None
    # the paths of the checkpoint are the module's, before anything exists
    assert check["snapshot_path"] == check["path"] == str(snap(cache))
    assert check["pairserve_dir"] == str(repo_dir(cache) / "pairserve")
    assert check["export_path"] == str(repo_dir(cache) / "pairserve" / "export" / COMMIT_A)
    assert check["restart_marker"] == str(repo_dir(cache) / "pairserve" / "restart-pending.json")

    hub.reset_log()
    apply = run_module("hf_snapshot", args, diff=True, env=hf_env)
    assert not apply.failed, apply.stdout + apply.stderr
    assert apply.changed and apply["commit"] == COMMIT_A
    assert apply["bytes_fetched"] == check["bytes_fetched"] and apply["throughput_bytes_per_s"] > 0
    assert apply["bytes_verified"] == apply["bytes_total"]
    for path, hub_file in FILES_A.items():
        entry = snap(cache) / path
        assert entry.is_symlink() and entry.read_bytes() == hub_file.data, path
    assert (repo_dir(cache) / "refs" / "pairserve").read_text() == COMMIT_A
    assert hub.bytes_sent() >= sum(f.size for f in FILES_A.values() if f.lfs)
    assert apply["model"]["hybrid"] is True and apply["model"]["quantization"] == "nvfp4"
    progress = json.loads(open(apply["progress_file"], encoding="utf-8").read())
    assert progress["state"] == "done" and progress["bytes_done"] == progress["bytes_total"] == apply["bytes_fetched"]

    hub.reset_log()
    again_check = run_module("hf_snapshot", args, check=True, diff=True, env=hf_env)
    assert not again_check.failed and not again_check.changed
    assert again_check["requests_sent"] is False and again_check["fetched"] == []

    again = run_module("hf_snapshot", args, diff=True, env=hf_env)
    assert not again.failed and not again.changed, again.result
    assert again["requests_sent"] is False and again["bytes_verified"] == 0
    assert hub.requests == [], "a complete pinned snapshot must not talk to the hub"


def test_prune_keeps_the_pinned_snapshot(fresh_hub, cache, hf_env):
    assert not run_module("hf_snapshot", snapshot_args(fresh_hub, cache, ref_name="pairserve"), env=hf_env).failed
    other = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, revision=COMMIT_B), env=hf_env)
    assert not other.failed and other.changed
    # only config.json differs between the commits: the shared blobs were not fetched again
    assert other["bytes_fetched"] == REPO.commits[COMMIT_B].files["config.json"].size
    env = ansible_runner._env(hf_env)  # pylint: disable=protected-access
    pruned = subprocess.run([str(ansible_runner.BIN / "hf"), "cache", "prune", "--cache-dir", str(cache), "-y"],
                            env=env, capture_output=True, text=True, check=False, timeout=120)
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert snap(cache, COMMIT_A).is_dir(), "the pinned, referenced snapshot was pruned"
    assert not snap(cache, COMMIT_B).exists(), "prune should have removed the detached revision (test is vacuous)"
    assert (snap(cache, COMMIT_A) / "tokenizer.json").read_bytes() == FILES_A["tokenizer.json"].data


def test_connection_dropped_mid_file_resumes_without_resending(fresh_hub, cache, hf_env):
    hub = fresh_hub
    repo = fresh_hub.state.repos[BIG_REPO]
    commit = next(iter(repo.commits))
    shard = repo.commits[commit].files["model.safetensors"]
    cut = 15 * 1024 * 1024
    hub.cut_after(shard.sha256, cut)
    result = run_module("hf_snapshot", snapshot_args(hub, cache, repo_id=BIG_REPO, revision=commit), env=hf_env)
    assert not result.failed, result.stdout + result.stderr
    gets = [r for r in hub.requests if r["path"] == "/cdn/" + shard.sha256 and r["method"] == "GET"]
    assert len(gets) == 2 and gets[0]["sent"] == cut, gets
    # huggingface_hub writes in 10 MiB chunks and resumes from the last whole chunk it wrote
    resumed_at = int(gets[1]["range"].split("=")[1].rstrip("-"))
    assert resumed_at == 10 * 1024 * 1024, gets[1]
    assert gets[1]["sent"] == shard.size - resumed_at
    assert hub.bytes_sent(shard.sha256) - shard.size == cut - resumed_at < 10 * 1024 * 1024
    assert (snap(cache, commit, BIG_REPO) / shard.path).read_bytes() == shard.data


def test_killed_run_resumes_without_refetching_finished_files(fresh_hub, cache, hf_env, tmp_path):
    hub = fresh_hub
    stalled = FILES_A[LFS_FILES[2]]
    hub.stall(stalled.sha256)
    args = snapshot_args(hub, cache)
    env = ansible_runner._env(hf_env)  # pylint: disable=protected-access
    cmd = [str(ansible_runner.BIN / "ansible"), "localhost", "-c", "local", "-m", "pairserve.llm.hf_snapshot",
           "-a", json.dumps(args)]
    proc = subprocess.Popen(cmd, cwd=ansible_runner.REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        others = [f for f in FILES_A.values() if f is not stalled]
        deadline = time.monotonic() + 120
        blobs = repo_dir(cache) / "blobs"
        while time.monotonic() < deadline:
            done = all((blobs / f.etag).exists() for f in others)
            if done and hub.state.stall_started.is_set():
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the first run never got to the stalled file: %s" % hub.requests)
    finally:
        # Ansible's worker runs the module in a session of its own: kill the whole tree, by PID.
        for pid in [proc.pid] + descendants(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(30)
    hub.release()
    assert not (blobs / stalled.sha256).exists()

    hub.reset_log()
    result = run_module("hf_snapshot", args, env=hf_env)
    assert not result.failed, result.stdout + result.stderr
    assert result["fetched"] == [stalled.path]
    fetched_paths = {r["path"] for r in hub.requests}
    for hub_file in others:
        assert not any(p.endswith("/" + hub_file.path) for p in fetched_paths), hub_file.path
        assert "/cdn/" + hub_file.sha256 not in fetched_paths
    # The stalled file had less than one of huggingface_hub's 10 MiB write units on disk (an empty partial file):
    # nothing to resume, so it comes whole; a kill never costs the finished files. The empty partial file is
    # removed, not left behind (tests/integration/faults resumes files killed further in).
    assert sum(r["sent"] for r in hub.requests if r["path"].startswith("/cdn/")) == stalled.size
    assert result["bytes_resumed"] == 0 and result["resumed"] == []
    assert [p for p in result["debris_removed"] if p.endswith(".incomplete")], result["debris_removed"]
    assert not [n for n in os.listdir(blobs) if n.endswith(".incomplete")]


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry, encoding="utf-8") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def test_verify_catches_a_corrupted_blob(fresh_hub, cache, hf_env):
    args = snapshot_args(fresh_hub, cache)
    assert not run_module("hf_snapshot", args, env=hf_env).failed
    shard = FILES_A[LFS_FILES[1]]
    blob = repo_dir(cache) / "blobs" / shard.sha256
    with blob.open("r+b") as handle:  # same size: only a hash can tell
        handle.seek(shard.size // 3)
        handle.write(b"\xff" * 16)
    fresh_hub.reset_log()
    result = run_module("hf_snapshot", args, env=hf_env)
    assert result.failed
    assert "do not match" in result["msg"] and shard.path in result["msg"] and "delete it" in result["msg"]
    assert result["mismatches"][0]["expected"] == shard.sha256
    assert fresh_hub.requests == []
    unverified = run_module("hf_snapshot", dict(args, verify=False), env=hf_env)
    assert not unverified.failed and not unverified.changed


def test_private_repo_needs_the_token(fresh_hub, cache, hf_env):
    args = snapshot_args(fresh_hub, cache, repo_id=PRIVATE_REPO)
    denied = run_module("hf_snapshot", args, env=hf_env)
    assert denied.failed and "pairserve_hf_token" in denied["msg"], denied.result
    assert "hf_pairserve" not in denied.stdout + denied.stderr
    fresh_hub.reset_log()
    allowed = run_module("hf_snapshot", dict(args, token=PRIVATE_TOKEN), env=hf_env)
    assert not allowed.failed and allowed.changed, allowed.stdout + allowed.stderr
    assert PRIVATE_TOKEN not in json.dumps(allowed.results) + allowed.stdout
    assert all(r["auth"] == "Bearer " + PRIVATE_TOKEN for r in fresh_hub.requests
               if not r["path"].startswith("/cdn/") and r["path"] != "/api/agent-harnesses")


def test_unknown_repo_and_revision(fresh_hub, cache, hf_env):
    repo = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, repo_id="nobody/nothing"), env=hf_env)
    assert repo.failed and "nobody/nothing was not found" in repo["msg"] and "pairserve_checkpoint_repo" in repo["msg"]
    rev = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, revision="0" * 40), env=hf_env)
    assert rev.failed and "0000000000000000000000000000000000000000 was not found" in rev["msg"]
    assert "pairserve_checkpoint_revision" in rev["msg"]
    assert tree(cache) == []


def test_unpinned_revision_refused_unless_allowed(fresh_hub, cache, hf_env):
    refused = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, revision="main"), env=hf_env)
    assert refused.failed and "not a 40-hex commit" in refused["msg"] and "hf models info" in refused["msg"]
    assert fresh_hub.requests == [] and tree(cache) == []
    allowed = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, revision="main", allow_unpinned=True),
                         env=hf_env)
    assert not allowed.failed and allowed["commit"] == COMMIT_B


def test_unreachable_hub_and_full_disk_fail_before_writing(fresh_hub, cache, hf_env):
    down = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, endpoint="http://127.0.0.1:9"), env=hf_env)
    assert down.failed and "Cannot reach http://127.0.0.1:9" in down["msg"], down.result
    full = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, reserve_free_space=1 << 60), env=hf_env)
    assert full.failed and "Not enough disk space" in full["msg"] and "pairserve_checkpoint_cache_dir" in full["msg"]
    assert not (repo_dir(cache) / "blobs").exists()


def test_bad_input_is_refused_before_anything_happens(fresh_hub, cache, hf_env):
    bad_repo = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, repo_id="no-slash"), env=hf_env)
    assert bad_repo.failed and "ORG/NAME" in bad_repo["msg"]
    bad_ref = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, ref_name="a/b"), env=hf_env)
    assert bad_ref.failed and "ref_name" in bad_ref["msg"]
    none = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, allow_patterns=["*.gguf"]), env=hf_env)
    assert none.failed and "select no file" in none["msg"]
    assert tree(cache) == []
