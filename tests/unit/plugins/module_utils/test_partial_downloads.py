"""What a killed run leaves and how the next run deals with it (module_utils/partial_downloads, hub's temp files):
a partial download is finished from its size on disk and hashed before it becomes a blob, leftovers no run will
finish are removed, and nothing a live writer holds is ever touched."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import hub, partial_downloads

REPO_ID = "org/name"
CONTENT = os.urandom(3 * 1024 * 1024 + 17)
ENTRY = {"size": len(CONTENT), "blob_id": hashlib.sha1(b"blob %d\0" % len(CONTENT) + CONTENT).hexdigest(),
         "sha256": hashlib.sha256(CONTENT).hexdigest()}
ETAG = ENTRY["sha256"]


@pytest.fixture()
def blobs(tmp_path):
    path = Path(partial_downloads.blobs_dir(str(tmp_path), REPO_ID))
    path.mkdir(parents=True)
    return path


def appender(calls):
    """fetch_rest that serves CONTENT from the offset it is asked for (the range request, without a network)."""
    def fetch(path, handle, offset, size):
        calls.append((path, offset, size))
        handle.write(CONTENT[offset:size])
    return fetch


@pytest.mark.parametrize("name,target", [
    (".tokenizer.json.pairserve-ab_3x9z1.tmp", "tokenizer.json"),
    (".record.json.k2j3h4g5.tmp", "record.json"),  # mkstemp's name before the pairserve- prefix
    (".tokenizer_config.json.pairserve-restore", "tokenizer_config.json"),
    (".model.safetensors.pairserve-link", "model.safetensors"),
])
def test_temp_file_names_are_recognised(name, target):
    match = hub.TEMP_FILE_RE.match(name)
    assert match and match.group("target") == target


@pytest.mark.parametrize("name", ["tokenizer.json", ".tokenizer.json", "main.1234abcd.tmp", ".x.toolongname1.tmp",
                                  ".gitattributes"])
def test_other_names_are_not_temp_files(name):
    assert not hub.TEMP_FILE_RE.match(name)


def test_sweep_spares_a_live_writer_and_removes_a_dead_ones(tmp_path):
    dead = tmp_path / ".record.json.pairserve-abcd1234.tmp"
    dead.write_bytes(b"{")
    other = tmp_path / ".notes.txt.pairserve-abcd1234.tmp"
    other.write_bytes(b"")
    with hub.writing_in(str(tmp_path)) as held:  # a writer in the middle of an atomic write
        assert held
        assert hub.sweep_temp_files(str(tmp_path), targets={"record.json"}, wait=0.2) == []
        assert dead.exists()
    assert hub.sweep_temp_files(str(tmp_path), targets={"record.json"}, check_mode=True) == [str(dead)]
    assert dead.exists()
    assert hub.sweep_temp_files(str(tmp_path), targets={"record.json"}) == [str(dead)]
    assert not dead.exists() and other.exists()  # only the targets asked for


def test_atomic_write_leaves_only_the_file(tmp_path):
    hub.atomic_write(str(tmp_path / "record.json"), b"{}")
    assert os.listdir(tmp_path) == ["record.json"] and (tmp_path / "record.json").read_bytes() == b"{}"


def test_partial_download_is_finished_from_its_size_and_hashed(tmp_path, blobs):
    (blobs / (ETAG + ".1a2b3c4d.incomplete")).write_bytes(CONTENT[:2 * 1024 * 1024])
    (blobs / (ETAG + ".5e6f7a8b.incomplete")).write_bytes(CONTENT[:1024 * 1024])  # an older, shorter one
    calls = []
    assert partial_downloads.resumable_bytes(str(tmp_path), REPO_ID, {ETAG: ENTRY["size"]}) == 2 * 1024 * 1024
    out = partial_downloads.resume(str(tmp_path), REPO_ID, {"model.safetensors": ENTRY}, ["model.safetensors"],
                                   appender(calls))
    assert calls == [("model.safetensors", 2 * 1024 * 1024, ENTRY["size"])]
    assert out[0]["action"] == "resumed" and out[0]["offset"] == 2 * 1024 * 1024
    assert out[0]["removed"] == [str(blobs / (ETAG + ".5e6f7a8b.incomplete"))]
    assert (blobs / ETAG).read_bytes() == CONTENT and out[0]["record"] == hub.stat_key(str(blobs / ETAG))
    assert sorted(os.listdir(blobs)) == [ETAG]


def test_a_partial_file_that_is_not_a_prefix_never_becomes_a_blob(tmp_path, blobs):
    (blobs / (ETAG + ".1a2b3c4d.incomplete")).write_bytes(b"\0" * 4096)  # e.g. zeros after a power cut
    out = partial_downloads.resume_one(str(tmp_path), REPO_ID, "model.safetensors", ENTRY, appender([]))
    assert out["action"] == "restarted" and os.listdir(blobs) == []  # the client fetches it from byte 0


def test_a_failed_range_request_keeps_the_partial_file(tmp_path, blobs):
    (blobs / (ETAG + ".1a2b3c4d.incomplete")).write_bytes(CONTENT[:4096])

    def unreachable(path, handle, offset, size):
        raise ConnectionError("hub unreachable")

    out = partial_downloads.resume_one(str(tmp_path), REPO_ID, "model.safetensors", ENTRY, unreachable)
    assert out["action"] == "kept" and "hub unreachable" in out["error"]
    assert os.listdir(blobs) == [partial_downloads.stable_name(ETAG)]  # the name the next run resumes from


def test_a_file_a_live_process_downloads_is_left_alone(tmp_path, blobs):
    (blobs / (ETAG + ".1a2b3c4d.incomplete")).write_bytes(CONTENT[:4096])
    with partial_downloads.blob_lock(str(tmp_path), REPO_ID, ETAG) as held:  # huggingface_hub's lock, taken
        assert held
        out = partial_downloads.resume_one(str(tmp_path), REPO_ID, "model.safetensors", ENTRY, appender([]))
        assert out["action"] == "skipped"
        assert partial_downloads.sweep(str(tmp_path), REPO_ID) == []
    assert os.listdir(blobs) == [ETAG + ".1a2b3c4d.incomplete"]


def test_sweep_removes_what_no_run_finishes_and_keeps_what_one_will(tmp_path, blobs):
    (blobs / ETAG).write_bytes(CONTENT)
    done = blobs / (ETAG + ".1a2b3c4d.incomplete")
    done.write_bytes(CONTENT[:10])
    other = "b" * 64
    wanted_later = blobs / (other + ".5e6f7a8b.incomplete")
    wanted_later.write_bytes(b"x" * 10)
    empty = blobs / (("c" * 40) + ".incomplete")
    empty.write_bytes(b"")
    probe = blobs / "tmp_0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
    probe.write_bytes(b"")
    # huggingface_hub's tree-listing cache, killed between mkstemp and the rename to <commit>.json
    trees = blobs.parent / "trees"
    trees.mkdir()
    listing = trees / ("d" * 40 + ".json")
    listing.write_text('{"format_version": 1, "files": {}}')
    tree_temp = trees / "tmpk3_9x0ab.tmp"
    tree_temp.write_text('{"format_version": 1, "fi')
    found = partial_downloads.sweep(str(tmp_path), REPO_ID, check_mode=True)
    assert sorted(found) == sorted(str(p) for p in (done, empty, probe, tree_temp)) and done.exists()
    assert tree_temp.exists()  # check mode lists, removes nothing
    assert sorted(partial_downloads.sweep(str(tmp_path), REPO_ID)) == sorted(found)
    assert sorted(os.listdir(blobs)) == sorted([ETAG, wanted_later.name])
    assert os.listdir(trees) == [listing.name]  # the finished listing stays
