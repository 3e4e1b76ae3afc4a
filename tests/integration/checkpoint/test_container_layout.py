"""The layout choice, proven in a real podman container that mounts only the model directory (as GPUStack does)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from checkpoint_helpers import repo_dir, snap, snapshot_args
from support.ansible_runner import REPO, run_module
from support.checkpoint_repo import COMMIT_A, checkpoint_repo

from lab import host as lab_host
from lab import images as lab_images

FILES_A = checkpoint_repo().commits[COMMIT_A].files
# Reads every file below /model and prints {path: [kind, sha256 or error]}.
READER = r"""
import hashlib, json, os
out = {}
for root, dirs, files in os.walk("/model"):
    for name in files:
        p = os.path.join(root, name)
        kind = "link" if os.path.islink(p) else "file"
        try:
            with open(p, "rb") as f:
                out[os.path.relpath(p, "/model")] = [kind, hashlib.sha256(f.read()).hexdigest()]
        except OSError as e:
            out[os.path.relpath(p, "/model")] = [kind, "error: %s" % e.strerror]
print(json.dumps(out))
"""

pytestmark = pytest.mark.skipif(shutil.which("podman") is None,
                                reason="podman is not installed: the container layout test needs a real container")


def podman(*args: str) -> subprocess.CompletedProcess:
    """podman with the lab's settings for this machine (lab/host.py), on the lab's node image (built when missing)."""
    lab_images.node_image()
    return subprocess.run(["podman", *args], cwd=REPO, env=lab_host.environ(), capture_output=True, text=True,
                          timeout=600, check=False)


def read_in_container(directory) -> dict:
    image = lab_host.NODE_IMAGE
    proc = podman("run", "--rm", "--network", "none", "-v", "%s:/model:ro" % directory, image,
                  "python3", "-c", READER)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_exported_checkpoint_reads_completely_inside_a_container(fresh_hub, cache, hf_env, tmp_path):
    assert not run_module("hf_snapshot", snapshot_args(fresh_hub, cache), env=hf_env).failed
    assert not run_module("tokenizer_patch", {"path": str(snap(cache))}, env=hf_env).failed
    export = repo_dir(cache) / "pairserve" / "export" / COMMIT_A  # the module's own path, not an argument
    exported = run_module("hf_snapshot", snapshot_args(fresh_hub, cache, export=True), env=hf_env)
    assert not exported.failed and exported.changed
    assert exported["path"] == exported["export_path"] == str(export)

    # the problem: the snapshot alone is a directory of dangling links once mounted without ../../blobs
    broken = read_in_container(snap(cache))
    patched = {"tokenizer.json", "tokenizer_config.json"}  # regular files in the snapshot since the patch
    assert all(kind == "link" and digest.startswith("error") for path, (kind, digest) in broken.items()
               if path not in patched), broken
    assert all(broken[path][0] == "file" for path in patched)

    # the layout: every file readable, regular, with the content the host sees (tokenizer patched)
    seen = read_in_container(export)
    assert sorted(seen) == sorted(FILES_A)
    for path, (kind, digest) in seen.items():
        host = hashlib.sha256((snap(cache) / path).read_bytes()).hexdigest()
        assert kind == "file" and digest == host, path
    assert seen["tokenizer.json"][1] != FILES_A["tokenizer.json"].sha256, "the container saw the unpatched tokenizer"
    for path, hub_file in FILES_A.items():
        if hub_file.lfs:
            assert seen[path][1] == hub_file.sha256
