"""tokenizer_patch SIGKILLed mid-write, again and again: the entry is always whole, the rerun converges and no
temp file survives it.

The snapshot comes from the local hub (a tokenizer.json of about 2 MB, so the write takes milliseconds, not
microseconds). Each cycle puts the pristine snapshot links back, starts the module and kills it: in most cycles
right after its temp file appeared (mid-write), in some at a random moment of the whole run (parsing, the
record, the second file). The rerun must leave the same bytes, the same blobs and the same tree as one
uninterrupted run, and (every third cycle) a third run must find nothing to do.
"""

from __future__ import annotations

import os
import shutil
import time

from faults_helpers import SEED, TOKENIZER_REPO, debris, kill, record, rng, run_module, sha256, start_module, tree

KILLS_WANTED = 20
MAX_CYCLES = 80
NAMES = ("tokenizer.json", "tokenizer_config.json")


def _temp_files(directory):
    return [n for n in os.listdir(directory) if n.startswith(".tokenizer.json.") and n.endswith(".tmp")]


def test_tokenizer_patch_killed_mid_write_converges(hub, hf_env, tmp_path):
    repo = hub.state.repos[TOKENIZER_REPO]
    commit = next(iter(repo.commits))
    files = repo.commits[commit].files
    cache = tmp_path / "cache"
    got = run_module("hf_snapshot", {"repo_id": TOKENIZER_REPO, "revision": commit, "endpoint": hub.endpoint,
                                     "cache_dir": str(cache)}, env=hf_env)
    assert got["_rc"] == 0 and got["changed"], got
    snap = cache / ("models--" + TOKENIZER_REPO.replace("/", "--")) / "snapshots" / commit
    links = {n: os.readlink(snap / n) for n in NAMES}
    backup = cache / ("models--" + TOKENIZER_REPO.replace("/", "--")) / "pairserve" / "tokenizer-patch" / commit

    def pristine():
        for name, target in links.items():
            if os.path.lexists(snap / name):
                os.unlink(snap / name)
            os.symlink(target, snap / name)
        shutil.rmtree(backup, ignore_errors=True)

    # One uninterrupted run: the bytes and the tree every rerun must reproduce; how long a run takes.
    started = time.monotonic()
    clean = run_module("tokenizer_patch", {"path": str(snap)})
    run_s = time.monotonic() - started
    assert clean["_rc"] == 0 and clean["changed"] and clean["debris_removed"] == [], clean
    patched = {n: (snap / n).read_bytes() for n in NAMES}
    assert b'"truncation": null' in patched["tokenizer.json"]
    reference = tree(cache)

    draw = rng("tokenizer_patch")
    kills = mid_write = any_point = converged = cycles = idempotent = 0
    debris_found = []
    while mid_write < KILLS_WANTED and cycles < MAX_CYCLES:
        cycles += 1
        pristine()
        at_any_point = draw.random() < 0.25
        proc = start_module("tokenizer_patch", {"path": str(snap)})
        if at_any_point:
            time.sleep(draw.uniform(0, run_s))
        else:
            deadline = time.monotonic() + 60
            while not _temp_files(snap) and proc.poll() is None and time.monotonic() < deadline:
                pass  # the write lasts milliseconds: poll without sleeping
            time.sleep(draw.uniform(0, 0.0015))
        killed = kill(proc)
        left_by_kill = killed and bool(_temp_files(snap))
        kills += killed
        mid_write += left_by_kill
        any_point += killed and at_any_point
        # whatever the moment, each entry is whole: the original link or the fully patched file
        for name in NAMES:
            entry = snap / name
            assert entry.is_symlink() or entry.read_bytes() == patched[name], name

        rerun = run_module("tokenizer_patch", {"path": str(snap)})
        assert rerun["_rc"] == 0 and not rerun.get("failed"), rerun
        if left_by_kill:
            assert any(os.path.basename(p).startswith(".tokenizer.json.") for p in rerun["debris_removed"]), rerun
        assert {n: (snap / n).read_bytes() for n in NAMES} == patched
        # the blobs stay pristine: the patch replaces the directory entry, never the shared file
        for name in NAMES:
            assert sha256(snap.parent.parent / "blobs" / files[name].etag) == files[name].sha256
        left = debris(cache, reference)
        debris_found.extend(left)
        assert left == [], left
        if cycles % 3 == 1:  # and nothing left to do (every third cycle: a run costs most of a second)
            third = run_module("tokenizer_patch", {"path": str(snap)})
            assert third["_rc"] == 0 and not third["changed"] and third["debris_removed"] == [], third
            idempotent += 1
        converged += 1

    figures = {"seed": SEED, "kills_tried": kills, "killed_mid_write": mid_write, "killed_at_any_point": any_point,
               "reruns_converged": converged, "third_runs_unchanged": idempotent, "cycles": cycles,
               "debris_found": len(debris_found)}
    record("tokenizer_patch SIGKILL mid-write", figures)
    assert mid_write >= KILLS_WANTED, figures
    assert converged == cycles and debris_found == [], figures
