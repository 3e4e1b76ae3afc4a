#!/usr/bin/env python
"""The lab's local Hugging Face Hub: serves a model directory as one pinned repo on 127.0.0.1.

    python -m lab.hub --repo pairserve/tiny-qwen3 --model-dir .cache/tiny-model/qwen3-tiny --state .lab/hub.json

The commit sha is derived from the files (like a git commit of that tree), so the same model gives the same
pinned revision every time; `--state` receives {"endpoint", "repo", "revision", "next_revision", "pid"} once the
hub listens. `next_revision` is a second, later commit of the same repository (the weights unchanged, a model
card added, as an upstream README fix would be): the lab's upgrade scenario moves the revision pin to it.
safetensors files are served as LFS blobs from a second port, as the Hub does. Runs until SIGTERM/SIGINT.
The server is tests/support/fakehub.py, the same local hub the test suite starts, so the lab and the tests exercise the
same protocol surface of the real huggingface_hub client.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
from pathlib import Path

from support.fakehub import Commit, FakeHub, HubFile, Repo

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def load_files(model_dir: Path) -> dict[str, HubFile]:
    files = {}
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(model_dir).as_posix()
        if rel.startswith("."):
            continue
        files[rel] = HubFile(rel, path, lfs=rel.endswith(LFS_SUFFIXES))
    return files


def tree_sha(files: dict[str, HubFile]) -> str:
    digest = hashlib.sha1()
    for rel, hub_file in sorted(files.items()):
        digest.update(("%s %s\n" % (hub_file.git_oid, rel)).encode())
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--model-dir", required=True, type=Path)
    parser.add_argument("--state", required=True, type=Path)
    args = parser.parse_args()
    if not (args.model_dir / "config.json").is_file():
        parser.error("--model-dir %s has no config.json: build it with scripts/build_tiny_model.py" % args.model_dir)
    files = load_files(args.model_dir)
    sha = tree_sha(files)
    card = ("---\nlicense: apache-2.0\n---\n# %s\n\nA tiny random-weight Qwen3-family model for the pairserve.llm "
            "lab. This commit only adds the model card; the weights and tokenizer are those of %s.\n" % (args.repo, sha))
    next_files = dict(files, **{"README.md": HubFile("README.md", card.encode())})
    next_sha = tree_sha(next_files)
    commits = {sha: Commit(sha, files), next_sha: Commit(next_sha, next_files)}
    hub = FakeHub([Repo(args.repo, commits, refs={"main": next_sha})]).start()
    state = {"endpoint": hub.endpoint, "repo": args.repo, "revision": sha, "next_revision": next_sha,
             "pid": os.getpid(), "files": len(files), "bytes": sum(f.size for f in files.values())}
    tmp = args.state.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    os.replace(tmp, args.state)
    print("lab hub: %s at %s serving %s@%s" % (os.getpid(), hub.endpoint, args.repo, sha), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    hub.stop()
    args.state.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
