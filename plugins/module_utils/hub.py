# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pinned Hugging Face checkpoints in the huggingface_hub cache: what is on disk, what is missing, and proof.

The download itself is huggingface_hub's (`snapshot_download`); this file only decides whether to call it and
checks what it left behind. Layout of the cache for one repository (huggingface_hub 2.x):

    <cache_dir>/models--ORG--NAME/blobs/<etag>               content (etag: sha256 for LFS files, git blob id otherwise)
    <cache_dir>/models--ORG--NAME/snapshots/<sha>/<file>     relative symlinks into ../../blobs
    <cache_dir>/models--ORG--NAME/refs/<name>                a commit sha; `hf cache prune` deletes unreferenced snapshots
    <cache_dir>/models--ORG--NAME/pairserve/                 ours: manifests, progress, tokenizer-patch records,
    <cache_dir>/models--ORG--NAME/pairserve/export/<sha>/    the hardlinked export a container mounts,
    <cache_dir>/models--ORG--NAME/pairserve/restart-pending.json   the checkpoint role's restart mark

This file is the one owner of that layout: the module hf_snapshot returns the paths (RV export_path,
restart_marker, ...) and the filter pairserve.llm.checkpoint_paths gives the same dict to a play that has no
module result (checkpoint_paths below).

`hf cache scan` reads only blobs/, snapshots/ and refs/ of a repository folder, so pairserve/ beside them is
invisible to it and is deleted together with the repository by `hf cache delete`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import stat
import threading
import time

from ansible_collections.pairserve.llm.plugins.module_utils import _files

COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
MANIFEST_FORMAT = 1
HASH_CHUNK = 8 * 1024 * 1024  # streaming: memory stays flat whatever the shard size

HOW_TO_FIND_COMMIT = (
    "Pin the 40-hex commit sha: open the model page's 'Files and versions' > commit history, or run "
    "`hf models info {repo} --revision main --expand sha`, or "
    "`python -c \"import huggingface_hub; print(huggingface_hub.HfApi().model_info('{repo}', revision='main').sha)\"`."
)


class HubError(Exception):
    """An error with a message for the operator: the input, what is wrong, what to do."""


def how_to_find_commit(repo_id: str) -> str:
    return HOW_TO_FIND_COMMIT.replace("{repo}", repo_id)


def repo_folder(cache_dir: str, repo_id: str) -> str:
    return os.path.join(cache_dir, "models--" + repo_id.replace("/", "--"))


def state_dir(cache_dir: str, repo_id: str) -> str:
    return os.path.join(repo_folder(cache_dir, repo_id), "pairserve")


def manifest_path(cache_dir: str, repo_id: str, commit: str) -> str:
    return os.path.join(state_dir(cache_dir, repo_id), "snapshot-%s.json" % commit)


def default_progress_path(cache_dir: str, repo_id: str, commit: str) -> str:
    return os.path.join(state_dir(cache_dir, repo_id), "progress-%s.json" % commit)


def snapshot_dir(cache_dir: str, repo_id: str, commit: str) -> str:
    return os.path.join(repo_folder(cache_dir, repo_id), "snapshots", commit)


def export_dir(cache_dir: str, repo_id: str, commit: str) -> str:
    """The self-contained directory of hardlinks a replica container mounts (sync_export)."""
    return os.path.join(state_dir(cache_dir, repo_id), "export", commit)


def restart_marker_path(cache_dir: str, repo_id: str) -> str:
    """The checkpoint role's mark: present while a node's replicas run on older files than the export."""
    return os.path.join(state_dir(cache_dir, repo_id), "restart-pending.json")


def checkpoint_paths(cache_dir: str, repo_id: str, commit: str) -> dict:
    """Every path of one pinned checkpoint in the cache, by the names hf_snapshot returns them under."""
    return {
        "repo_folder": repo_folder(cache_dir, repo_id),
        "snapshot_path": snapshot_dir(cache_dir, repo_id, commit),
        "pairserve_dir": state_dir(cache_dir, repo_id),
        "export_path": export_dir(cache_dir, repo_id, commit),
        "restart_marker": restart_marker_path(cache_dir, repo_id),
    }


# -- listing ---------------------------------------------------------------------------------------------------

def listing_from_tree(tree) -> dict:
    """{path: {size, blob_id, sha256}} from HfApi.list_repo_tree (RepoFile objects; folders skipped)."""
    files = {}
    for item in tree:
        if not hasattr(item, "blob_id"):
            continue
        lfs = getattr(item, "lfs", None)
        files[item.path] = {
            "size": int(item.size),
            "blob_id": item.blob_id,
            "sha256": lfs.sha256 if lfs is not None else None,
        }
    return files


def filter_paths(paths, allow_patterns=None, ignore_patterns=None) -> list:
    """Same matching as huggingface_hub's filter_repo_objects: fnmatch, a trailing '/' means the whole folder."""

    def normalise(patterns):
        if patterns is None:
            return None
        return [p + "*" if p.endswith("/") else p for p in patterns]

    allow, ignore = normalise(allow_patterns), normalise(ignore_patterns)
    selected = []
    for path in sorted(paths):
        if allow is not None and not any(fnmatch.fnmatch(path, p) for p in allow):
            continue
        if ignore is not None and any(fnmatch.fnmatch(path, p) for p in ignore):
            continue
        selected.append(path)
    return selected


def expected_blob_name(entry: dict) -> str:
    """The blob name huggingface_hub uses: sha256 for LFS files, the git blob id otherwise."""
    return entry["sha256"] or entry["blob_id"]


# -- manifest ---------------------------------------------------------------------------------------------------

def read_manifest(cache_dir: str, repo_id: str, commit: str):
    try:
        with open(manifest_path(cache_dir, repo_id, commit), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if data.get("format") != MANIFEST_FORMAT or data.get("commit") != commit or data.get("repo_id") != repo_id:
        return None
    return data


def write_manifest(cache_dir: str, repo_id: str, commit: str, files: dict, verified: dict) -> None:
    data = {"format": MANIFEST_FORMAT, "repo_id": repo_id, "commit": commit, "files": files, "verified": verified}
    atomic_write(manifest_path(cache_dir, repo_id, commit), json.dumps(data, indent=1, sort_keys=True).encode())


def local_status(cache_dir: str, repo_id: str, commit: str, files: dict, wanted: list) -> dict:
    """Which wanted files are present: the blob has the listed size and the snapshot entry resolves.

    A snapshot entry that is a regular file counts as present: tokenizer_patch puts patched regular files there
    on purpose, and huggingface_hub itself accepts any existing entry.
    """
    folder = repo_folder(cache_dir, repo_id)
    snap = snapshot_dir(cache_dir, repo_id, commit)
    present, missing, missing_bytes = [], [], 0
    for path in wanted:
        entry = files[path]
        blob = os.path.join(folder, "blobs", expected_blob_name(entry))
        pointer = os.path.join(snap, path)
        try:
            ok = os.stat(blob).st_size == entry["size"] and os.path.exists(pointer)
        except OSError:
            ok = False
        if ok:
            present.append(path)
        else:
            missing.append(path)
            if not os.path.exists(blob):
                missing_bytes += entry["size"]
    return {"present": present, "missing": missing, "missing_bytes": missing_bytes}


# -- files --------------------------------------------------------------------------------------------------------

# Temp files of a write in progress: ours (`.<name>.pairserve-XXXXXXXX.tmp`, older releases `.<name>.XXXXXXXX.tmp`
# from mkstemp), the symlink tokenizer_patch swaps in on restore, the hardlink the export swaps in.
TEMP_FILE_RE = re.compile(
    r"^\.(?P<target>.+?)\.(?:(?:pairserve-)?[A-Za-z0-9_]{8}\.tmp|pairserve-restore|pairserve-link)$")


@contextlib.contextmanager
def _dir_lock(directory: str, exclusive: bool, wait: float = 0.0):
    """flock on the directory itself: shared while a temp file of ours exists in it, exclusive to sweep it.

    Yields whether the lock is held. The kernel drops the lock when its holder dies, so a temp file found while
    holding the exclusive lock belongs to a writer that is gone (killed mid-write) and can never be finished.
    A filesystem without flock on directories (some NFS mounts) yields False: writers go on unlocked and the
    sweep leaves the directory alone.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        yield False
        return
    try:
        held = False
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
                held = True
                break
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        yield held
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, mode: int = 0o644) -> None:
    """_files.atomic_write under the directory's shared lock (the directory is made first).

    The temp file exists only while this writer holds a shared lock on the directory; a run killed mid-write
    leaves it behind, and the next run's sweep_temp_files removes it.
    """
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    with _dir_lock(directory, exclusive=False):
        _files.atomic_write(path, data, mode=mode)


fsync_dir = _files.fsync_dir


def writing_in(directory: str):
    """A context manager holding the directory's shared lock while a temp entry of ours exists in it (see
    atomic_write); it yields whether the lock is held."""
    return _dir_lock(directory, exclusive=False)


def sweep_temp_files(directory: str, targets=None, check_mode: bool = False, wait: float = 5.0) -> list:
    """Remove the temp files a killed writer of ours left in `directory` (only those of `targets` when given).

    Runs under the directory's exclusive lock, so no temp file of a live writer is touched; when the lock
    cannot be had within `wait` seconds (another run is writing there right now), nothing is removed.
    Returns the removed paths (in check mode: the paths that would be removed, nothing is locked or removed).
    """
    def candidates():
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return []
        found = []
        for name in names:
            match = TEMP_FILE_RE.match(name)
            if match and (targets is None or match.group("target") in targets):
                path = os.path.join(directory, name)
                if not os.path.isdir(path) or os.path.islink(path):
                    found.append(path)
        return found

    if check_mode:
        return candidates()
    removed = []
    with _dir_lock(directory, exclusive=True, wait=wait) as held:
        if not held:
            return []
        for path in candidates():
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                pass
    return removed


def file_digests(path: str) -> tuple:
    """(sha256, git blob id) of a file, read in 8 MiB chunks."""
    size = os.stat(path).st_size
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(HASH_CHUNK)
            if not chunk:
                break
            sha256.update(chunk)
            sha1.update(chunk)
    return sha256.hexdigest(), sha1.hexdigest()


def stat_key(path: str) -> list:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def verify_blobs(cache_dir: str, repo_id: str, files: dict, wanted: list, verified: dict) -> tuple:
    """Hash every wanted blob whose (size, mtime, inode) changed since it was last proven good.

    LFS files are checked against the listing's sha256, the others against their git blob id.
    Returns (verified records, list of mismatches, bytes hashed).
    """
    folder = repo_folder(cache_dir, repo_id)
    records, bad, hashed = {}, [], 0
    for path in wanted:
        entry = files[path]
        name = expected_blob_name(entry)
        blob = os.path.join(folder, "blobs", name)
        key = stat_key(blob)
        if verified.get(name) == key:
            records[name] = key
            continue
        sha256, git_oid = file_digests(blob)
        hashed += key[0]
        if entry["sha256"]:
            ok, expected, actual = sha256 == entry["sha256"], entry["sha256"], sha256
        else:
            ok, expected, actual = git_oid == entry["blob_id"], entry["blob_id"], git_oid
        if ok:
            records[name] = key
        else:
            bad.append({"path": path, "blob": blob, "expected": expected, "actual": actual})
    return records, bad, hashed


def write_ref(cache_dir: str, repo_id: str, ref_name: str, commit: str, check_mode: bool) -> tuple:
    """refs/<ref_name> holding the commit (no newline, as huggingface_hub writes it). Returns (before, after)."""
    path = os.path.join(repo_folder(cache_dir, repo_id), "refs", ref_name)
    try:
        with open(path, encoding="utf-8") as handle:
            before = handle.read().strip()
    except OSError:
        before = None
    if before != commit and not check_mode:
        atomic_write(path, commit.encode())
    return before, commit


def check_disk(cache_dir: str, needed: int, reserve: int) -> None:
    probe = cache_dir
    while not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    free = shutil.disk_usage(probe).free
    if needed and free - needed < reserve:
        raise HubError(
            "Not enough disk space in cache_dir %s (filesystem of %s): the download needs %s, %s are free and "
            "%s must stay free (reserve_free_space). Free space there, or point cache_dir "
            "(pairserve_checkpoint_cache_dir) at a larger filesystem."
            % (cache_dir, probe, human_bytes(needed), human_bytes(free), human_bytes(reserve)))


def human_bytes(num: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(num) < 1024 or unit == "TiB":
            return "%.1f %s" % (num, unit) if unit != "B" else "%d B" % num
        num /= 1024.0
    return "%d B" % num


# -- export: a self-contained directory of hardlinks -----------------------------------------------------------------

def sync_export(cache_dir: str, repo_id: str, commit: str, wanted: list, check_mode: bool) -> list:
    """Make <export_dir(...)>/<file> the same inode as what snapshots/<sha>/<file> resolves to.

    Why: GPUStack bind-mounts only the model directory into the replica container, where the snapshot's relative
    symlinks into ../../blobs dangle. Hardlinks cost no extra disk and need no mount outside the directory.
    A patched tokenizer file is a regular file in the snapshot; the export links that file, never the blob.
    Returns the changed paths.
    """
    snap = snapshot_dir(cache_dir, repo_id, commit)
    export = export_dir(cache_dir, repo_id, commit)
    changed = []
    wanted_set = set(wanted)
    for path in wanted:
        source = os.path.realpath(os.path.join(snap, path))
        target = os.path.join(export, path)
        src_stat = os.stat(source)
        try:
            dst_stat = os.lstat(target)
            same = (stat.S_ISREG(dst_stat.st_mode) and dst_stat.st_ino == src_stat.st_ino
                    and dst_stat.st_dev == src_stat.st_dev)
        except FileNotFoundError:
            same = False
        if same:
            continue
        changed.append(path)
        if check_mode:
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = os.path.join(os.path.dirname(target), ".%s.pairserve-link" % os.path.basename(target))
        if os.path.lexists(tmp):
            os.unlink(tmp)
        try:
            os.link(source, tmp)
        except OSError as exc:
            raise HubError(
                "Cannot hardlink %s into the export %s: %s. The export must be on the filesystem of the cache's "
                "blobs (hardlinks cost no extra disk): do not mount another filesystem or link another directory "
                "at %s or below it." % (source, export, exc, state_dir(cache_dir, repo_id)))
        os.replace(tmp, target)
    if os.path.isdir(export):
        for root, _dirs, names in os.walk(export):
            for name in names:
                rel = os.path.relpath(os.path.join(root, name), export)
                if rel not in wanted_set:
                    changed.append(rel)
                    if not check_mode:
                        os.unlink(os.path.join(root, name))
    return changed


# -- progress ---------------------------------------------------------------------------------------------------

class Progress:
    """Writes bytes done / total / rate to a JSON file once a second while huggingface_hub downloads.

    Bytes are measured on disk (finished blobs plus the partial downloads, `<etag>[.<id>].incomplete`), so
    the figure does not depend on the library's progress-bar internals.
    """

    def __init__(self, path: str, blobs_dir: str, pending: dict, interval: float = 1.0):
        self.path = path
        self.blobs_dir = blobs_dir
        self.pending = pending  # blob name -> size, for the files this run has to fetch
        self.total = sum(pending.values())
        self.interval = interval
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pairserve-progress", daemon=True)

    def measure(self) -> int:
        done = 0
        try:
            names = os.listdir(self.blobs_dir)
        except OSError:
            return 0
        for name in names:
            base = name.split(".", 1)[0]
            if base not in self.pending:
                continue
            try:
                size = os.stat(os.path.join(self.blobs_dir, name)).st_size
            except OSError:
                continue
            done += min(size, self.pending[base])
        return min(done, self.total)

    def write(self, state: str) -> dict:
        done = self.measure() if state != "done" else self.total
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = done / elapsed
        record = {
            "state": state,
            "bytes_done": done,
            "bytes_total": self.total,
            "percent": round(100.0 * done / self.total, 1) if self.total else 100.0,
            "rate_bytes_per_s": int(rate),
            "rate": human_bytes(rate) + "/s",
            "elapsed_s": round(elapsed, 1),
            "eta_s": int((self.total - done) / rate) if rate > 0 and done < self.total else 0,
            "pid": os.getpid(),
            "updated": time.time(),
        }
        try:
            atomic_write(self.path, json.dumps(record).encode())
        except OSError:
            pass  # progress is a courtesy; never fail a download over it
        return record

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.write("downloading")

    def __enter__(self) -> "Progress":
        self.write("starting")
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        self._thread.join(5)
        self.write("failed" if exc_type else "done")


# -- errors ----------------------------------------------------------------------------------------------------------

def explain(exc: BaseException, repo_id: str, revision: str, endpoint: str) -> str:
    """Turn a huggingface_hub / httpx error into a message that says what to do."""
    name = type(exc).__name__
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if name == "RevisionNotFoundError":
        return ("Revision %s was not found in %s on %s. Check pairserve_checkpoint_revision: it must be a commit of "
                "this repository. %s" % (revision, repo_id, endpoint, how_to_find_commit(repo_id)))
    if name == "GatedRepoError" or status in (401, 403):
        return ("Access to %s on %s was refused (HTTP %s): the repository is private or gated. Accept its terms on "
                "the model page if gated, then set pairserve_hf_token (module option token) to a token that can "
                "read it." % (repo_id, endpoint, status or "401/403"))
    if name == "RepositoryNotFoundError" or status == 404:
        return ("Repository %s was not found on %s (HTTP 404). Check pairserve_checkpoint_repo for typos; a private "
                "repository also answers 404 without a token, so set pairserve_hf_token if it is private."
                % (repo_id, endpoint))
    if name in ("ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException", "OfflineModeIsEnabled",
                "LocalEntryNotFoundError", "IncompleteSnapshotError", "RemoteProtocolError") \
            or isinstance(exc, (ConnectionError, TimeoutError)):
        return ("Cannot reach %s to download %s: %s: %s. Check the node's network, DNS and proxy settings "
                "(HTTPS_PROXY), or pairserve_hf_endpoint for a mirror; finished files are kept and a rerun continues."
                % (endpoint, repo_id, name, exc))
    return "Downloading %s@%s from %s failed: %s: %s" % (repo_id, revision, endpoint, name, exc)


# -- what the checkpoint is -----------------------------------------------------------------------------------------

HYBRID_LAYER_TYPES = ("linear_attention", "mamba", "mamba2", "gated_deltanet")


def compressed_tensors_scheme(qcfg: dict):
    """"nvfp4" for a compressed-tensors checkpoint whose weights are 4-bit floats in groups of 16 (what
    llm-compressor writes as format nvfp4-pack-quantized), so the FP4 checks see it; None otherwise."""
    if qcfg.get("quant_method") != "compressed-tensors":
        return None
    if "nvfp4" in str(qcfg.get("format") or "").lower():
        return "nvfp4"
    for group in (qcfg.get("config_groups") or {}).values():
        weights = (group or {}).get("weights") or {}
        if weights.get("num_bits") == 4 and weights.get("type") == "float" and weights.get("group_size") == 16:
            return "nvfp4"
    return None


def describe_checkpoint(directory: str) -> dict:
    """Facts from config.json and hf_quant_config.json that decide how vLLM must be started.

    hybrid: linear-attention / mamba layers present. vLLM needs --mamba-cache-mode for these, and on a model
    without them that flag boots and then fails the first completion with HTTP 500 (checked on 0.25.1).
    mtp: a multi-token-prediction head is present (speculative decoding possible; 4.6x slower in the seed).
    """
    def load(name):
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    cfg = load("config.json")
    if not isinstance(cfg, dict):
        return {}
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    layer_types = text.get("layer_types") or cfg.get("layer_types") or []
    hybrid = any(t in HYBRID_LAYER_TYPES for t in layer_types) or any(
        k in text for k in ("full_attention_interval", "mamba_d_state", "linear_num_key_heads", "ssm_cfg"))
    mtp_layers = text.get("mtp_num_hidden_layers", cfg.get("mtp_num_hidden_layers")) \
        or text.get("num_nextn_predict_layers", cfg.get("num_nextn_predict_layers")) or 0
    quant = load("hf_quant_config.json")
    scheme = None
    if isinstance(quant, dict):
        scheme = (quant.get("quantization") or {}).get("quant_algo")
    if not scheme and isinstance(cfg.get("quantization_config"), dict):
        qcfg = cfg["quantization_config"]
        scheme = qcfg.get("quant_algo") or compressed_tensors_scheme(qcfg) or qcfg.get("quant_method")
    architectures = cfg.get("architectures") or [None]
    return {
        "architecture": architectures[0],
        "model_type": cfg.get("model_type"),
        "hybrid": bool(hybrid),
        "quantization": scheme.lower() if isinstance(scheme, str) else None,
        "vision": isinstance(cfg.get("vision_config"), dict),
        "mtp": int(mtp_layers) > 0,
        "mtp_layers": int(mtp_layers),
        "native_context": int(text.get("max_position_embeddings") or cfg.get("max_position_embeddings") or 0),
    }
