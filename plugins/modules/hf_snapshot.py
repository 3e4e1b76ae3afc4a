#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Download one pinned revision of a Hugging Face model repository into the huggingface_hub cache."""

from __future__ import annotations

DOCUMENTATION = r"""
module: hf_snapshot
short_description: Download a pinned Hugging Face model snapshot into the huggingface_hub cache
version_added: 0.1.0
description:
  - Downloads the files of one commit of a model repository with the huggingface_hub client
    (C(snapshot_download)) into the standard cache layout (C(blobs/), C(snapshots/<sha>/), C(refs/)).
  - A pinned download is recorded in a manifest once it is complete (and verified). A later run checks the
    manifest against the files on disk and, when nothing is missing, sends no HTTP request at all.
  - Check mode asks the Hub for the listing (one request) and reports which files and how many bytes would be
    fetched; it writes nothing.
  - An interrupted download keeps every finished file; the next run fetches only what is missing. A connection
    dropped mid-file is resumed by huggingface_hub with an HTTP range request.
  - After a crash - a run killed mid-file (SIGKILL, OOM kill, async timeout, reboot) leaves the file's partial
    download in C(blobs/) (huggingface_hub 2.4 names it C(<etag>.<id>.incomplete), unique to its process, and
    would start the file again from byte 0). The next run resumes it from its size on disk with a range request,
    under huggingface_hub's lock of that file, and hashes the whole file (sha256 for LFS files, git blob id
    otherwise) before it becomes a blob, whatever O(verify) says; a file that does not match is downloaded again
    from byte 0. What a kill costs is at most the piece the client held in memory (10 MiB).
  - A successful run removes what a killed run left and no run will finish (RV(debris_removed), a change) -
    partial downloads of complete blobs, empty ones, huggingface_hub's probe files, temp files of the manifest,
    the progress file and the ref. A partial download of a file that this run does not select is kept for the
    run that needs it.
  - Free disk space is checked against the listing's total before anything is fetched.
  - Optionally writes C(refs/<ref_name>) so that C(hf cache prune) keeps the pinned snapshot, and exports the
    snapshot as a self-contained directory of hardlinks that a container can mount on its own (O(export)).
  - The module owns the collection's layout of the cache - it computes the paths of one checkpoint from
    O(cache_dir), O(repo_id) and the commit and returns them (RV(snapshot_path), RV(export_path),
    RV(pairserve_dir), RV(restart_marker)), in check mode too. A play that has no result of this module gets the
    same paths from the filter P(pairserve.llm.checkpoint_paths#filter).
author:
  - pairserve.llm maintainers (@pairserve)
requirements:
  - huggingface_hub >= 2.4 on the managed node (the role runs this module with the node venv's Python).
extends_documentation_fragment:
  - pairserve.llm.attributes
attributes:
  check_mode:
    support: full
    details:
      - Sends one listing request unless the manifest already proves the snapshot complete (then none).
      - Reports the partial downloads it would resume (RV(bytes_resumed)) and the leftovers of a killed run it
        would remove (RV(debris_removed)).
  diff_mode:
    support: full
options:
  repo_id:
    description: Model repository, C(ORG/NAME).
    type: str
    required: true
  revision:
    description:
      - The 40-hex commit sha to download.
      - A branch or tag name is refused unless O(allow_unpinned=true); then it is resolved to its current commit
        with one request on every run.
    type: str
    required: true
  allow_unpinned:
    description: Accept a branch or tag name in O(revision).
    type: bool
    default: false
  allow_patterns:
    description: Only files matching one of these shell patterns (C(fnmatch); a trailing C(/) means a folder).
    type: list
    elements: str
  ignore_patterns:
    description: Skip files matching one of these shell patterns.
    type: list
    elements: str
  cache_dir:
    description: The huggingface_hub cache directory (C(HF_HUB_CACHE)).
    type: path
    default: ~/.cache/huggingface/hub
  token:
    description: Hugging Face access token for private or gated repositories.
    type: str
  endpoint:
    description:
      - Hub endpoint. Passed explicitly to huggingface_hub, which reads C(HF_ENDPOINT) only at import time.
    type: str
    default: https://huggingface.co
  ref_name:
    description:
      - Write C(refs/<ref_name>) with the commit. A snapshot downloaded by sha has no ref, and C(hf cache prune)
        deletes such detached revisions.
    type: str
  verify:
    description:
      - Hash every file against the Hub's listing (sha256 for LFS files, git blob id for the others) after the
        download. Files already proven good are not hashed again unless their size, mtime or inode changed.
    type: bool
    default: true
  export:
    description:
      - Also present the snapshot as a directory of hardlinks, RV(export_path)
        (C(<cache_dir>/models--ORG--NAME/pairserve/export/<sha>), on the filesystem of O(cache_dir) by
        construction), and return it as RV(path).
      - Use it as the model path of a container that mounts only that directory; the snapshot's relative symlinks
        into C(../../blobs) would dangle there. A patched file in the snapshot (see
        M(pairserve.llm.tokenizer_patch)) is linked as patched; a file that is not in the snapshot's selection
        is removed from it.
    type: bool
    default: false
  progress_file:
    description:
      - JSON file updated once a second during the download with C(bytes_done), C(bytes_total), C(percent),
        C(rate) and C(eta_s). Defaults to C(pairserve/progress-<sha>.json) in the repository's cache folder.
    type: path
  reserve_free_space:
    description: Bytes that must stay free on the cache filesystem after the download.
    type: int
    default: 1073741824
  max_workers:
    description: Files downloaded in parallel.
    type: int
    default: 8
  required_files:
    description:
      - Files the revision must have among those selected (e.g. C(config.json), C(tokenizer.json),
        C(tokenizer_config.json)); the module fails naming the missing ones before anything is downloaded, in
        check mode too.
    type: list
    elements: str
    default: []
  inspect:
    description:
      - When the snapshot is not on disk yet, read C(config.json) (and C(hf_quant_config.json)) of the revision from
        the Hub, a few kilobytes into a temporary directory (not the cache), and return RV(model) from them, so
        the checkpoint is known before the download and before anything is installed. Also in check mode.
    type: bool
    default: false
notes:
  - Xet-backed repositories download through C(hf_xet) when it is installed, as huggingface_hub decides.
seealso:
  - module: pairserve.llm.tokenizer_patch
"""

EXAMPLES = r"""
- name: Download the pinned checkpoint and keep it from being pruned
  pairserve.llm.hf_snapshot:
    repo_id: orcarouter/Qwen3.8-27B-Uncensored-NVFP4
    revision: "{{ pairserve_checkpoint_revision }}"
    cache_dir: /var/lib/pairserve/hf-cache
    token: "{{ pairserve_hf_token | default(omit) }}"
    ref_name: pairserve
    export: true
  vars:
    ansible_python_interpreter: "{{ pairserve_node_python }}"
  register: snapshot

- name: Show the directory a container mounts
  ansible.builtin.debug:
    msg: "{{ snapshot.path }}"  # == snapshot.export_path

- name: Only the configuration files, from a mirror
  pairserve.llm.hf_snapshot:
    repo_id: orcarouter/Qwen3.8-27B-Uncensored-NVFP4
    revision: 0123456789abcdef0123456789abcdef01234567
    allow_patterns: ["*.json"]
    endpoint: https://hf-mirror.example.internal
"""

RETURN = r"""
commit:
  description: The commit that was downloaded.
  returned: always
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
snapshot_path:
  description: C(snapshots/<sha>) in the cache.
  returned: always
  type: str
path:
  description: Where to point a model loader, RV(export_path) with O(export=true), otherwise RV(snapshot_path).
  returned: always
  type: str
export_path:
  description:
    - The export directory of this commit, C(<cache_dir>/models--ORG--NAME/pairserve/export/<sha>).
    - Returned also without O(export) and in check mode (where nothing is written); the directory exists only
      once a run with O(export=true) has made it.
  returned: always
  type: str
  sample: /var/lib/pairserve/hf-cache/models--org--name/pairserve/export/0123456789abcdef0123456789abcdef01234567
pairserve_dir:
  description:
    - The collection's folder in the repository's cache folder, C(<cache_dir>/models--ORG--NAME/pairserve)
      (manifests, progress files, tokenizer patch records, the exports, the restart mark), beside
      huggingface_hub's C(blobs/), C(snapshots/) and C(refs/).
  returned: always
  type: str
restart_marker:
  description:
    - Where role P(pairserve.llm.checkpoint#role) keeps its mark that a node's replicas run on older files than
      the export, C(<cache_dir>/models--ORG--NAME/pairserve/restart-pending.json). This module neither writes
      nor reads it; it only names it, so that the path has one owner.
  returned: always
  type: str
files:
  description: The files of the snapshot selected by the patterns.
  returned: always
  type: list
  elements: str
fetched:
  description: Files that were (or in check mode would be) downloaded.
  returned: always
  type: list
  elements: str
bytes_fetched:
  description: Bytes downloaded (or in check mode to download), without the bytes kept from partial downloads.
  returned: always
  type: int
bytes_resumed:
  description: Bytes of partial downloads a killed run left that this run kept (or in check mode would keep).
  returned: always
  type: int
resumed:
  description: Files finished from a partial download of an earlier run (empty in check mode).
  returned: always
  type: list
  elements: str
debris_removed:
  description:
    - Partial and temp files of a killed run that this run removed (in check mode, would remove).
  returned: always
  type: list
  elements: str
bytes_total:
  description: Size of the selected files.
  returned: always
  type: int
bytes_verified:
  description: Bytes hashed by O(verify) in this run, and by the resume of a partial download.
  returned: always
  type: int
duration_s:
  description: Seconds spent downloading.
  returned: always
  type: float
throughput_bytes_per_s:
  description: RV(bytes_fetched) divided by RV(duration_s); 0 when nothing was fetched.
  returned: always
  type: int
requests_sent:
  description: Whether this run talked to the Hub at all (false when the manifest proved the snapshot complete).
  returned: always
  type: bool
ref:
  description: C(refs/<ref_name>) path, when O(ref_name) is set.
  returned: when O(ref_name) is set
  type: str
progress_file:
  description: The progress file of this download.
  returned: always
  type: str
model:
  description:
    - Facts read from C(config.json) and C(hf_quant_config.json) of the snapshot (before the first download, empty,
      or with O(inspect) read from those two files on the Hub, fetched into a temporary directory). Keys C(architecture),
      C(model_type), C(hybrid), C(quantization), C(vision), C(mtp), C(mtp_layers), C(native_context).
  returned: always
  type: dict
"""

import os
import shutil
import tempfile
import time
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.pairserve.llm.plugins.module_utils import hub, partial_downloads


def _import_hub():
    """huggingface_hub, imported after the environment is set: it reads its settings at import time."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # a module's stderr is no terminal
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    import huggingface_hub  # pylint: disable=import-outside-toplevel
    return huggingface_hub


def _fetch_rest(hf, repo_id, commit, endpoint, token):
    """How a partial file is finished: huggingface_hub's own HEAD (which gives the LFS location) and its http_get
    with resume_size, i.e. an HTTP range request from the size on disk, appended to the open file."""
    from huggingface_hub import file_download  # pylint: disable=import-outside-toplevel
    from huggingface_hub.utils import build_hf_headers  # pylint: disable=import-outside-toplevel

    def fetch(path, handle, offset, size):
        url = hf.hf_hub_url(repo_id, path, revision=commit, endpoint=endpoint)
        meta = hf.get_hf_file_metadata(url, token=token, endpoint=endpoint, retry_on_errors=True)
        headers = build_hf_headers(token=token)
        location = meta.location or url
        if urlsplit(location).netloc != urlsplit(url).netloc:
            headers.pop("authorization", None)  # a signed URL of another host (the CDN): no token, as the client does
        file_download.http_get(location, handle, resume_size=offset, headers=headers, expected_size=size)
    return fetch


def _listing(module, hf, repo_id, commit, token, endpoint):
    api = hf.HfApi(endpoint=endpoint, token=token)
    try:
        return hub.listing_from_tree(api.list_repo_tree(repo_id, recursive=True, revision=commit))
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg=hub.explain(exc, repo_id, commit, endpoint), error=type(exc).__name__)
    return None


def _inspect(module, hf, repo_id, commit, endpoint, token, files):
    """describe_checkpoint over config.json (and hf_quant_config.json) of ``commit``, fetched to a temporary dir."""
    tmp = tempfile.mkdtemp(prefix="pairserve-inspect-")
    try:
        where = None
        for name in ("config.json", "hf_quant_config.json"):
            if name in files:
                try:
                    where = os.path.dirname(hf.hf_hub_download(repo_id, name, revision=commit, cache_dir=tmp,
                                                               endpoint=endpoint, token=token))
                except Exception as exc:  # pylint: disable=broad-except
                    module.fail_json(msg=hub.explain(exc, repo_id, commit, endpoint), error=type(exc).__name__)
        return hub.describe_checkpoint(where) if where else {}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", required=True),
            allow_unpinned=dict(type="bool", default=False),
            allow_patterns=dict(type="list", elements="str"),
            ignore_patterns=dict(type="list", elements="str"),
            cache_dir=dict(type="path", default="~/.cache/huggingface/hub"),
            token=dict(type="str", no_log=True),
            endpoint=dict(type="str", default="https://huggingface.co"),
            ref_name=dict(type="str"),
            verify=dict(type="bool", default=True),
            export=dict(type="bool", default=False),
            progress_file=dict(type="path"),
            reserve_free_space=dict(type="int", default=1 << 30),
            max_workers=dict(type="int", default=8),
            required_files=dict(type="list", elements="str", default=[]),
            inspect=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    repo_id, revision, endpoint = p["repo_id"], p["revision"].strip(), p["endpoint"].rstrip("/")
    cache_dir = os.path.abspath(p["cache_dir"])
    if not hub.REPO_ID_RE.match(repo_id):
        module.fail_json(msg="repo_id %r is not of the form ORG/NAME (pairserve_checkpoint_repo)." % repo_id)
    if p["ref_name"] is not None and (not p["ref_name"] or "/" in p["ref_name"] or p["ref_name"].startswith(".")):
        module.fail_json(msg="ref_name %r must be a plain name without '/' (it becomes refs/<ref_name>)."
                         % p["ref_name"])
    if p["max_workers"] < 1:
        module.fail_json(msg="max_workers must be at least 1, got %d." % p["max_workers"])

    pinned = bool(hub.COMMIT_RE.match(revision))
    if not pinned and not p["allow_unpinned"]:
        module.fail_json(msg="revision %r is not a 40-hex commit sha: a branch or tag moves, and an unpinned "
                             "checkpoint changes under a running service. %s Or set allow_unpinned=true to follow "
                             "it deliberately." % (revision, hub.how_to_find_commit(repo_id)))

    hf = None
    requests_sent = False
    commit = revision
    if not pinned:
        try:
            hf = _import_hub()
        except ImportError as exc:
            module.fail_json(msg=missing_required_lib("huggingface_hub"), exception=str(exc))
        requests_sent = True
        try:
            commit = hf.HfApi(endpoint=endpoint, token=p["token"]).model_info(repo_id, revision=revision).sha
        except Exception as exc:  # pylint: disable=broad-except
            module.fail_json(msg=hub.explain(exc, repo_id, revision, endpoint), error=type(exc).__name__)

    # Fast path: a manifest written after a verified complete download, re-checked against the disk.
    manifest = hub.read_manifest(cache_dir, repo_id, commit)
    files = manifest["files"] if manifest else None
    verified_before = manifest.get("verified", {}) if manifest else {}
    status = None
    wanted = []
    if files is not None:
        wanted = hub.filter_paths(files, p["allow_patterns"], p["ignore_patterns"])
        status = hub.local_status(cache_dir, repo_id, commit, files, wanted)
    if status is None or status["missing"]:
        if hf is None:
            try:
                hf = _import_hub()
            except ImportError as exc:
                module.fail_json(msg=missing_required_lib("huggingface_hub"), exception=str(exc))
        requests_sent = True
        files = _listing(module, hf, repo_id, commit, p["token"], endpoint)
        wanted = hub.filter_paths(files, p["allow_patterns"], p["ignore_patterns"])
        status = hub.local_status(cache_dir, repo_id, commit, files, wanted)
    absent = [name for name in p["required_files"] if name not in wanted]
    if absent:
        module.fail_json(msg="%s@%s has no %s among the files it would download (%d of %d listed%s): a replica could "
                             "not start from it. Pin a revision that has them (pairserve_checkpoint_revision), or fix "
                             "pairserve_checkpoint_allow_patterns / pairserve_checkpoint_ignore_patterns."
                         % (repo_id, commit, ", ".join(absent), len(wanted), len(files),
                            "" if not [n for n in absent if n in files] else "; %s listed but left out by the patterns"
                            % ", ".join(n for n in absent if n in files)), missing_files=absent, commit=commit)
    if not wanted:
        module.fail_json(msg="allow_patterns %s / ignore_patterns %s select no file of %s@%s (%d files). Fix the "
                             "patterns." % (p["allow_patterns"], p["ignore_patterns"], repo_id, commit, len(files)))

    paths = hub.checkpoint_paths(cache_dir, repo_id, commit)
    snap, export_dir = paths["snapshot_path"], paths["export_path"]
    progress_file = p["progress_file"] or hub.default_progress_path(cache_dir, repo_id, commit)
    bytes_total = sum(files[f]["size"] for f in wanted)
    fetched = list(status["missing"])
    # what a run killed mid-file left on disk is kept: only the rest of such a file is fetched
    pending = dict((hub.expected_blob_name(files[path]), files[path]["size"]) for path in fetched)
    bytes_resumed = partial_downloads.resumable_bytes(cache_dir, repo_id, pending) if fetched else 0
    bytes_fetched = status["missing_bytes"] - bytes_resumed
    changed = bool(fetched)
    before = {"files_present": sorted(status["present"])}
    after = {"files_present": sorted(wanted)}
    result = dict(changed=False, commit=commit, snapshot_path=snap, path=export_dir if p["export"] else snap,
                  export_path=export_dir, pairserve_dir=paths["pairserve_dir"],
                  restart_marker=paths["restart_marker"], files=wanted,
                  fetched=fetched, bytes_fetched=bytes_fetched, bytes_resumed=bytes_resumed, bytes_total=bytes_total,
                  bytes_verified=0, duration_s=0.0, throughput_bytes_per_s=0, requests_sent=requests_sent,
                  progress_file=progress_file, resumed=[], debris_removed=[], model={})

    duration = 0.0
    debris = []
    resumed_records = {}
    if fetched:
        # also in check mode: the role's preflight is a check-mode run, and it must fail before anything changes
        try:
            hub.check_disk(cache_dir, bytes_fetched, p["reserve_free_space"])
        except hub.HubError as exc:
            module.fail_json(msg=str(exc), **result)
    if fetched and not module.check_mode:
        blobs = partial_downloads.blobs_dir(cache_dir, repo_id)
        started = time.monotonic()
        try:
            with hub.Progress(progress_file, blobs, pending):
                resumed = partial_downloads.resume(cache_dir, repo_id, files, fetched,
                                                   _fetch_rest(hf, repo_id, commit, endpoint, p["token"]),
                                                   p["max_workers"])
                for item in resumed:
                    debris.extend(item["removed"])
                    if item["error"]:
                        module.warn("Resuming %s from byte %d failed (%s); huggingface_hub fetches it itself."
                                    % (item["path"], item["offset"], item["error"]))
                    if item["record"]:
                        resumed_records[hub.expected_blob_name(files[item["path"]])] = item["record"]
                bytes_resumed = sum(item["offset"] for item in resumed if item["action"] == "resumed")
                result.update(bytes_resumed=bytes_resumed, bytes_fetched=status["missing_bytes"] - bytes_resumed,
                              resumed=[item["path"] for item in resumed if item["action"] == "resumed"])
                bytes_fetched = result["bytes_fetched"]
                hf.snapshot_download(repo_id, revision=commit, cache_dir=cache_dir, endpoint=endpoint,
                                     token=p["token"], allow_patterns=p["allow_patterns"],
                                     ignore_patterns=p["ignore_patterns"], max_workers=p["max_workers"])
        except Exception as exc:  # pylint: disable=broad-except
            module.fail_json(msg=hub.explain(exc, repo_id, commit, endpoint), error=type(exc).__name__, **result)
        duration = time.monotonic() - started
        status = hub.local_status(cache_dir, repo_id, commit, files, wanted)
        if status["missing"]:
            module.fail_json(msg="huggingface_hub finished but %d file(s) of %s@%s are still missing or have the "
                                 "wrong size: %s. Rerun; if it persists, delete those blobs from %s."
                                 % (len(status["missing"]), repo_id, commit, ", ".join(status["missing"][:5]), blobs),
                             **result)

    verified = dict(verified_before)
    if not module.check_mode:
        if p["verify"]:
            # a resumed file was hashed whole before it became a blob: not again
            records, bad, hashed = hub.verify_blobs(cache_dir, repo_id, files, wanted,
                                                    dict(verified_before, **resumed_records))
            result["bytes_verified"] = hashed + sum(r[0] for r in resumed_records.values())
            if bad:
                module.fail_json(
                    msg="verify: %d file(s) of %s@%s do not match the Hub's listing: %s. The blob is corrupt "
                        "(disk or transfer); delete it and its snapshot entry, then rerun to download it again."
                        % (len(bad), repo_id, commit,
                           "; ".join("%s (blob %s: expected %s, got %s)" % (b["path"], b["blob"], b["expected"],
                                                                            b["actual"]) for b in bad)),
                    mismatches=bad, **result)
            verified.update(records)
        else:
            verified.update(resumed_records)
        if manifest is None or manifest.get("files") != files or verified != verified_before:
            hub.write_manifest(cache_dir, repo_id, commit, files, verified)

    if p["ref_name"]:
        ref_before, ref_after = hub.write_ref(cache_dir, repo_id, p["ref_name"], commit, module.check_mode)
        result["ref"] = os.path.join(hub.repo_folder(cache_dir, repo_id), "refs", p["ref_name"])
        before["ref"], after["ref"] = ref_before, ref_after
        changed = changed or ref_before != ref_after

    if p["export"]:
        if module.check_mode and (fetched or not os.path.isdir(snap)):
            export_changed = list(wanted)
        else:
            try:
                export_changed = hub.sync_export(cache_dir, repo_id, commit, wanted, module.check_mode)
            except (hub.HubError, OSError) as exc:
                module.fail_json(msg=str(exc), **result)
        before["export_outdated"] = sorted(export_changed)
        after["export_outdated"] = []
        changed = changed or bool(export_changed)

    # What a run killed at any point left behind and no run will finish: partial files of complete blobs,
    # huggingface_hub's probe files, our own temp files (manifest, progress, ref).
    debris.extend(partial_downloads.sweep(cache_dir, repo_id, module.check_mode))
    for directory in (hub.state_dir(cache_dir, repo_id), os.path.join(hub.repo_folder(cache_dir, repo_id), "refs")):
        debris.extend(hub.sweep_temp_files(directory, check_mode=module.check_mode))
    if p["progress_file"]:
        debris.extend(hub.sweep_temp_files(os.path.dirname(os.path.abspath(progress_file)),
                                           targets={os.path.basename(progress_file)}, check_mode=module.check_mode))
    result["debris_removed"] = sorted(set(debris))
    if debris:
        before["debris"], after["debris"] = result["debris_removed"], []
        changed = True

    if os.path.isdir(snap) and os.path.isfile(os.path.join(snap, "config.json")):
        result["model"] = hub.describe_checkpoint(snap)
    elif p["inspect"] and "config.json" in files:
        # Before the download (the role's preflight, in check mode): the few kilobytes that say what the model is,
        # read into a temporary directory, never into the cache.
        result["model"] = _inspect(module, hf or _import_hub(), repo_id, commit, endpoint, p["token"], files)
        result["requests_sent"] = True
    result.update(changed=changed, duration_s=round(duration, 3),
                  throughput_bytes_per_s=int(bytes_fetched / duration) if duration > 0 else 0)
    if module._diff:
        result["diff"] = {"before": before, "after": after,
                          "before_header": "%s@%s" % (repo_id, commit), "after_header": "%s@%s" % (repo_id, commit)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
