# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Partial downloads a killed hf_snapshot left in blobs/: resume them from their size on disk, or remove them.

Why this exists: huggingface_hub 2.4 downloads each file to `blobs/<etag>.<8 hex>.incomplete`, a name unique to
the process, opened with "wb", and deletes it in a `finally` that a SIGKILL (OOM killer, async timeout, reboot)
never runs. The next process picks a new name, so the file starts again from byte 0 and the old partial file
stays on disk for good (`hf cache scan` lists it as an incomplete download). Releases before 2.4 wrote
`blobs/<etag>.incomplete` and resumed from it; that is the name a partial file is brought to here.

What a run does with them, before it calls snapshot_download:
- under huggingface_hub's own per-file lock (`<cache>/.locks/models--ORG--NAME/<etag>.lock`, flock), so a file
  that a live process is downloading right now is never touched;
- the longest partial file of a missing blob is renamed to `<etag>.incomplete`, every other one is removed;
- the rest of the file is fetched with an HTTP range request from its size on disk, appended to it, and the
  whole file is hashed (sha256 for LFS files, the git blob id otherwise) before it is renamed to `blobs/<etag>`:
  a partial file is never taken for a finished blob. A mismatch removes it and the client fetches the file
  from byte 0; a failed request keeps it for the next run and lets the client try the file itself.
After a successful run, sweep() removes what can never be resumed: partial files of blobs that are complete,
empty ones, huggingface_hub's own probe files (`blobs/tmp_<uuid>`, a `tmpXXXXXXXX/` symlink probe
in the repository folder) and the temp file of its tree-listing cache (`trees/tmpXXXXXXXX.tmp`, written with
mkstemp and renamed to `trees/<commit>.json`; a kill between the two leaves it).
A partial file of a blob this run did not select is kept for the run that needs it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import fcntl
import os
import re
import shutil
import time

from ansible_collections.pairserve.llm.plugins.module_utils import hub

# `<etag>.incomplete` (huggingface_hub < 2.4, and ours), `<etag>.<8 hex>.incomplete` (2.4); etag: sha256 for LFS
# files, git blob id (sha1) for the others.
PARTIAL_RE = re.compile(r"^(?P<etag>[0-9a-f]{64}|[0-9a-f]{40})(?:\.[0-9a-f]{8})?\.incomplete$")
PROBE_FILE_RE = re.compile(r"^tmp_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PROBE_DIR_RE = re.compile(r"^tmp[a-z0-9_]{8}$")
PROBE_DIR_FILES = frozenset(("dummy_file_src", "dummy_file_dst"))
PROBE_DIR_AGE_S = 2.0
# huggingface_hub 2.4's tree-listing cache writes `trees/<commit>.json` through `tempfile.mkstemp(suffix=".tmp")`
TREE_TEMP_RE = re.compile(r"^tmp[a-z0-9_]{8}\.tmp$")


def blobs_dir(cache_dir: str, repo_id: str) -> str:
    return os.path.join(hub.repo_folder(cache_dir, repo_id), "blobs")


def stable_name(etag: str) -> str:
    return etag + ".incomplete"


def lock_path(cache_dir: str, repo_id: str, etag: str) -> str:
    """huggingface_hub's lock for one blob of one repository (file_download: `.locks/<repo folder>/<etag>.lock`)."""
    return os.path.join(cache_dir, ".locks", os.path.basename(hub.repo_folder(cache_dir, repo_id)), etag + ".lock")


@contextlib.contextmanager
def blob_lock(cache_dir: str, repo_id: str, etag: str):
    """Try huggingface_hub's lock of one blob without waiting; yields whether it is held.

    huggingface_hub takes it (filelock, which is flock on Linux) around every download of that blob, so holding
    it means no live process writes a partial file of that blob. Lock files are part of huggingface_hub's cache
    layout; it leaves them in place too.
    """
    path = lock_path(cache_dir, repo_id, etag)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o664)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = True
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            held = False
        yield held
    finally:
        os.close(fd)


def partial_files(cache_dir: str, repo_id: str) -> dict:
    """{etag: [(name, size), ...]} of every partial download in the repository's blobs/."""
    folder = blobs_dir(cache_dir, repo_id)
    found = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in sorted(names):
        match = PARTIAL_RE.match(name)
        if not match:
            continue
        try:
            size = os.lstat(os.path.join(folder, name)).st_size
        except OSError:
            continue
        found.setdefault(match.group("etag"), []).append((name, size))
    return found


def resumable_bytes(cache_dir: str, repo_id: str, pending: dict) -> int:
    """Bytes on disk that a resume keeps for the missing blobs `pending` ({etag: size}): the longest usable
    partial file of each (longer than the file itself is not usable)."""
    total = 0
    for etag, parts in partial_files(cache_dir, repo_id).items():
        if etag in pending and not os.path.exists(os.path.join(blobs_dir(cache_dir, repo_id), etag)):
            sizes = [size for _name, size in parts if size <= pending[etag]]
            total += max(sizes) if sizes else 0
    return total


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def _digest_ok(path: str, entry: dict) -> bool:
    sha256, git_oid = hub.file_digests(path)
    return sha256 == entry["sha256"] if entry["sha256"] else git_oid == entry["blob_id"]


def resume_one(cache_dir: str, repo_id: str, path: str, entry: dict, fetch_rest) -> dict:
    """Finish one file from its partial download(s); see the module docstring. Returns what happened:
    {path, action: resumed | restarted | kept | skipped | none, offset, fetched, removed, error, record}."""
    etag = hub.expected_blob_name(entry)
    folder = blobs_dir(cache_dir, repo_id)
    blob = os.path.join(folder, etag)
    out = {"path": path, "action": "none", "offset": 0, "fetched": 0, "removed": [], "error": None, "record": None}
    with blob_lock(cache_dir, repo_id, etag) as held:
        if not held:
            out["action"] = "skipped"  # a live process downloads this file right now
            return out
        parts = partial_files(cache_dir, repo_id).get(etag, [])
        usable = [(size, name) for name, size in parts if 0 < size <= entry["size"]]
        best = max(usable)[1] if usable and not os.path.exists(blob) else None
        for name, _size in parts:
            if name != best and _remove(os.path.join(folder, name)):
                out["removed"].append(os.path.join(folder, name))
        if best is None:
            return out
        partial = os.path.join(folder, stable_name(etag))
        if best != stable_name(etag):
            os.replace(os.path.join(folder, best), partial)
        offset = os.stat(partial).st_size
        out["offset"] = offset
        try:
            with open(partial, "ab") as handle:
                if offset < entry["size"]:
                    fetch_rest(path, handle, offset, entry["size"])
                handle.flush()
                os.fsync(handle.fileno())
        except Exception as exc:  # pylint: disable=broad-except
            # Kept for the next run; snapshot_download now tries the file itself (and fails the same way if the
            # network is gone, with its own message).
            out.update(action="kept", error="%s: %s" % (type(exc).__name__, exc))
            return out
        out["fetched"] = os.stat(partial).st_size - offset
        if os.stat(partial).st_size != entry["size"] or not _digest_ok(partial, entry):
            _remove(partial)
            out["removed"].append(partial)
            out["action"] = "restarted"  # not a prefix of the file (disk or transfer error): from byte 0
            return out
        os.replace(partial, blob)
        hub.fsync_dir(folder)
        out["action"] = "resumed"
        out["record"] = hub.stat_key(blob)
    return out


def resume(cache_dir: str, repo_id: str, files: dict, paths: list, fetch_rest, workers: int = 8) -> list:
    """resume_one for each of `paths` that has a partial download on disk, `workers` at a time."""
    with_parts = partial_files(cache_dir, repo_id)
    todo = [p for p in paths if hub.expected_blob_name(files[p]) in with_parts]
    if not todo:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
        return list(pool.map(lambda p: resume_one(cache_dir, repo_id, p, files[p], fetch_rest), todo))


def _names(directory: str) -> list:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def _remove_named(directory: str, pattern, check_mode: bool) -> list:
    """Remove the plain files of DIRECTORY whose names match PATTERN (check mode: list them); returns the paths."""
    removed = []
    for name in _names(directory):
        path = os.path.join(directory, name)
        if pattern.match(name) and os.path.isfile(path) and not os.path.islink(path):
            if check_mode or _remove(path):
                removed.append(path)
    return removed


def sweep(cache_dir: str, repo_id: str, check_mode: bool = False) -> list:
    """Remove what a killed download left in blobs/ that no run will ever resume; returns the paths.

    Partial files of a blob that exists, or empty ones, go (under the blob's lock: never one a live process is
    writing); so do huggingface_hub's permission probe files (`tmp_<uuid>`, empty, deleted by a live process
    itself within microseconds), its symlink probe directory (`tmpXXXXXXXX/` in the repository folder) and the
    temp files of its tree-listing cache (`trees/tmpXXXXXXXX.tmp`).
    Check mode lists them without locking or removing anything.
    """
    folder = blobs_dir(cache_dir, repo_id)
    removed = []
    for etag, parts in partial_files(cache_dir, repo_id).items():
        complete = os.path.exists(os.path.join(folder, etag))
        doomed = [name for name, size in parts if complete or size == 0]
        if not doomed:
            continue
        if check_mode:
            removed.extend(os.path.join(folder, name) for name in doomed)
            continue
        with blob_lock(cache_dir, repo_id, etag) as held:
            if held:
                removed.extend(os.path.join(folder, name) for name in doomed if _remove(os.path.join(folder, name)))
    removed.extend(_remove_named(folder, PROBE_FILE_RE, check_mode))
    repo = hub.repo_folder(cache_dir, repo_id)
    for name in _names(repo):
        path = os.path.join(repo, name)
        # A live process keeps its probe directory for microseconds; one older than PROBE_DIR_AGE_S is left over.
        if PROBE_DIR_RE.match(name) and os.path.isdir(path) and not os.path.islink(path) \
                and set(os.listdir(path)) <= PROBE_DIR_FILES and time.time() - os.stat(path).st_mtime > PROBE_DIR_AGE_S:
            if not check_mode:
                shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    # No age or lock is needed for these: a live writer holds one for the milliseconds of a json.dump, and if one
    # is removed under it, its os.replace fails and huggingface_hub ignores the failure (the listing is fetched
    # again next time): nothing is lost either way.
    removed.extend(_remove_named(os.path.join(repo, "trees"), TREE_TEMP_RE, check_mode))
    return removed
