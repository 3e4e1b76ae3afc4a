"""hf_snapshot SIGKILLed mid-file, again and again: every rerun resumes from what is on disk and converges.

Each cycle downloads a 24 MiB shard from the local hub, paced so that a kill at a random moment lands in the
middle of the file, kills the module (sometimes its resuming rerun as well; every fourth cycle instead kills one
run at a random moment of its whole life, start-up to sweep), then lets a rerun finish. Per kill
the hub's request log proves what the rerun asked for: a range request from the size of the partial file left
on disk, so the bytes sent twice stay below the client's 10 MiB write unit. (Right before each kill the hub stops
sending until the client has read what its socket held: the figure is what the client itself lost, not what a
busy CI machine's kernel buffered for it.) After each converged rerun the blob hashes to the listing's sha256
and the cache holds exactly what an uninterrupted download leaves (no partial, temp or probe file).
"""

from __future__ import annotations

import os
import shutil
import time

from faults_helpers import (HUB_WRITE_UNIT, SEED, SHARD_REPO, MiB, debris, drain_then_kill, kill, record, result_of,
                            rng, run_module, sha256, start_module, tree)

KILLS_WANTED = 20
RATE = 32 * MiB  # bytes/s of an LFS body: the shard takes ~0.75 s, long enough to be hit at a random moment
MAX_CYCLES = 60


def _shard(hub):
    repo = hub.state.repos[SHARD_REPO]
    commit = next(iter(repo.commits))
    return commit, repo.commits[commit].files["model.safetensors"]


def _partials(blobs, etag):
    """{name: size} of the shard's partial files on disk."""
    try:
        names = os.listdir(blobs)
    except OSError:
        return {}
    return {n: os.path.getsize(os.path.join(blobs, n)) for n in names
            if n.startswith(etag + ".") and n.endswith(".incomplete")}


def _gets(hub, etag):
    return [r for r in hub.requests if r["method"] == "GET" and r["path"] == "/cdn/" + etag]


def _range_start(request) -> int:
    return int(request["range"].split("=")[1].split("-")[0]) if request["range"] else 0


def test_hf_snapshot_killed_mid_file_resumes_and_converges(hub, hf_env, tmp_path):
    commit, shard = _shard(hub)
    draw = rng("hf_snapshot")
    hub.throttle(RATE)
    try:
        # What an uninterrupted download leaves: the reference for "no debris".
        clean_cache = tmp_path / "clean"
        clean = run_module("hf_snapshot", {"repo_id": SHARD_REPO, "revision": commit, "endpoint": hub.endpoint,
                                           "cache_dir": str(clean_cache)}, env=hf_env)
        assert clean["_rc"] == 0 and clean["changed"], clean
        reference = tree(clean_cache)

        kills = mid_file = any_point = converged = unchanged = cycles = 0
        resent, debris_found, resumed_from = [], [], []
        while mid_file < KILLS_WANTED and cycles < MAX_CYCLES:
            cycles += 1
            cache = tmp_path / f"cycle-{cycles:02d}"
            args = {"repo_id": SHARD_REPO, "revision": commit, "endpoint": hub.endpoint, "cache_dir": str(cache)}
            folder = cache / ("models--" + SHARD_REPO.replace("/", "--"))
            blobs = folder / "blobs"
            offset_on_disk = 0
            if cycles % 4 == 0:
                # a kill at any moment of a run (start-up, listing, transfer, hash, rename, manifest, sweep)
                proc = start_module("hf_snapshot", args, env=hf_env)
                time.sleep(draw.uniform(0, 2.0))
                if kill(proc):
                    kills += 1
                    any_point += 1
                    if not (blobs / shard.sha256).exists():
                        offset_on_disk = max(_partials(blobs, shard.sha256).values(), default=0)
            # 1 to 3 kills in a row mid-file: the 2nd and 3rd hit the rerun while it resumes the partial file.
            chain = 0 if cycles % 4 == 0 else draw.choice((1, 2, 2, 3))
            for _link in range(chain):
                remaining_s = (shard.size - offset_on_disk) / RATE
                if remaining_s < 0.15:
                    break  # too little left to hit; the converging run below finishes it
                hub.reset_log()
                proc = start_module("hf_snapshot", args, env=hf_env)
                deadline = time.monotonic() + 60
                while not _gets(hub, shard.sha256) and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.005)
                gets = _gets(hub, shard.sha256)
                assert gets, "the run never asked for the shard: %s" % result_of(proc)
                assert _range_start(gets[0]) == offset_on_disk, (gets, offset_on_disk)
                time.sleep(draw.uniform(0.02, remaining_s * 0.9))
                if not drain_then_kill(hub, proc):
                    break  # it finished first: that run converged by itself (checked below like any rerun)
                kills += 1
                done = (blobs / shard.sha256).exists()
                mid_file += not done
                kept = shard.size if done else max(_partials(blobs, shard.sha256).values(), default=0)
                sent = sum(r["sent"] for r in _gets(hub, shard.sha256))
                # sent in this run and lost: what the next run must ask for again
                resent.append(sent - (kept - offset_on_disk))
                assert 0 <= resent[-1] < HUB_WRITE_UNIT, (sent, kept, offset_on_disk)
                offset_on_disk = kept
                if done:
                    break

            blob_before = (blobs / shard.sha256).exists()
            hub.reset_log()
            rerun = run_module("hf_snapshot", args, env=hf_env)
            assert rerun["_rc"] == 0 and not rerun.get("failed"), rerun
            gets = _gets(hub, shard.sha256)
            if blob_before or offset_on_disk == shard.size:
                assert gets == [], gets  # nothing left to fetch (at most a hash and a rename were missing)
            else:
                # the rerun's one request for the shard starts where the partial file on disk ends
                assert len(gets) == 1 and _range_start(gets[0]) == offset_on_disk, (gets, offset_on_disk)
                assert gets[0]["sent"] == shard.size - offset_on_disk
            if offset_on_disk and not blob_before:
                resumed_from.append(offset_on_disk)
                assert rerun["bytes_resumed"] == offset_on_disk and rerun["resumed"] == ["model.safetensors"], rerun
            # never a partial file taken for a finished blob: the blob hashes to the listing's sha256
            assert sha256(blobs / shard.sha256) == shard.sha256
            assert os.path.realpath(folder / "snapshots" / commit / "model.safetensors") == str(blobs / shard.sha256)
            left = debris(cache, reference)
            debris_found.extend(left)
            assert left == [], left
            if cycles % 3 == 1:  # and a further run has nothing to do, without a request (every third cycle)
                again = run_module("hf_snapshot", args, env=hf_env)
                assert again["_rc"] == 0 and not again["changed"] and again["requests_sent"] is False, again
                unchanged += 1
            converged += 1
            shutil.rmtree(cache)
    finally:
        hub.throttle(None)

    figures = {"seed": SEED, "kills_tried": kills, "killed_mid_file": mid_file, "killed_at_any_point": any_point,
               "reruns_converged": converged, "further_runs_unchanged": unchanged,
               "cycles": cycles, "resumed_from_mib": sorted({round(o / MiB) for o in resumed_from}),
               "bytes_resent_max": max(resent, default=0), "bytes_resent_total": sum(resent),
               "debris_found": len(debris_found)}
    record("hf_snapshot SIGKILL mid-file", figures)
    assert mid_file >= KILLS_WANTED, figures
    assert converged == cycles, figures
    assert max(resent) < HUB_WRITE_UNIT and debris_found == [], figures
    assert any(o > 0 for o in resumed_from), "no rerun had anything to resume: the kills never kept a byte"
