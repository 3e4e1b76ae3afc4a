#!/usr/bin/env python
"""hf_snapshot throughput against a plain parallel HTTP fetch of the same files from the same local hub.

Prints figures; it is not a timed test. Run from the repository root:

    .venv/bin/python benchmarks/hf_snapshot_throughput.py [--files 4] [--size-mib 256]

- The files are random (incompressible, not sparse), generated once under .cache/checkpoint-bench/ and served
  from disk by tests/support/fakehub.py on 127.0.0.1 (LFS: a 302 to a second port, as on the Hub).
- Baseline: one thread per file, streaming GET of the LFS URL into a file, 8 MiB chunks.
- hf_snapshot: the module through real Ansible (verify off for the ratio; the verify pass is timed separately).
  The ratio uses the module's own download time (duration_s); Ansible's start-up is printed apart.
- Resume: one file's connection is cut at 60 % and the figure is the bytes the hub had to send twice.
- Peak memory: the largest resident set of any child process (the module's Python included).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from support.ansible_runner import run_module  # noqa: E402
from support.fakehub import Commit, FakeHub, HubFile, Repo  # noqa: E402

WORK = ROOT / ".cache" / "checkpoint-bench"
MIB = 1024 * 1024


def make_files(count: int, size: int) -> list[Path]:
    WORK.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = WORK / f"shard-{i}-{size // MIB}M.bin"
        if not path.exists() or path.stat().st_size != size:
            with path.open("wb") as handle:
                for _chunk in range(size // (8 * MIB)):
                    handle.write(os.urandom(8 * MIB))
                handle.write(os.urandom(size % (8 * MIB)))
        paths.append(path)
    return paths


def plain_fetch(urls: list[str], dest: Path) -> float:
    def one(item):
        index, url = item
        with httpx2.stream("GET", url, timeout=60) as response, (dest / str(index)).open("wb") as out:
            response.raise_for_status()
            for chunk in response.iter_bytes(8 * MIB):
                out.write(chunk)

    start = time.monotonic()
    with ThreadPoolExecutor(len(urls)) as pool:
        list(pool.map(one, enumerate(urls)))
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    opts = parser.parse_args()
    size = opts.size_mib * MIB
    print(f"generating/reusing {opts.files} x {opts.size_mib} MiB random files in {WORK}", flush=True)
    sources = make_files(opts.files, size)
    t0 = time.monotonic()
    names = [f"model-{i + 1:05d}-of-{opts.files:05d}.safetensors" for i in range(len(sources))]
    files = {name: HubFile(name, p, lfs=True) for name, p in zip(names, sources)}
    print(f"hashed the sources in {time.monotonic() - t0:.1f} s", flush=True)
    sha = "b" * 40
    repo = Repo("bench/big", {sha: Commit(sha, files)})
    total = sum(f.size for f in files.values())
    env = {"HF_HUB_DISABLE_XET": "1", "HF_TOKEN": "", "NO_PROXY": "127.0.0.1"}
    scratch = Path(tempfile.mkdtemp(prefix="bench-", dir=WORK))
    try:
        with FakeHub([repo]) as hub:
            urls = [f"{hub.state.cdn_base}/cdn/{f.sha256}" for f in files.values()]
            plain, module_s, wall = [], [], []
            for round_ in range(opts.rounds):
                target = scratch / f"plain-{round_}"
                target.mkdir()
                plain.append(plain_fetch(urls, target))
                shutil.rmtree(target)
                cache = scratch / f"cache-{round_}"
                args = {"repo_id": "bench/big", "revision": sha, "endpoint": hub.endpoint, "cache_dir": str(cache),
                        "verify": False, "reserve_free_space": 0}
                start = time.monotonic()
                result = run_module("hf_snapshot", args, env=env)
                wall.append(time.monotonic() - start)
                if result.failed:
                    print(result.stdout, result.stderr)
                    return 1
                module_s.append(result["duration_s"])
                if round_ == opts.rounds - 1:
                    verify = run_module("hf_snapshot", dict(args, verify=True), env=env)
                    verify_s = None if verify.failed else verify["bytes_verified"]
                    start = time.monotonic()
                    hub.reset_log()
                    rerun = run_module("hf_snapshot", dict(args, verify=True), env=env)
                    rerun_wall = time.monotonic() - start
                    rerun_requests = len(hub.requests)
                shutil.rmtree(cache)

            # resume: cut the first file at 60 %
            cache = scratch / "cache-resume"
            first = next(iter(files.values()))
            hub.reset_log()
            hub.cut_after(first.sha256, int(first.size * 0.6))
            args = {"repo_id": "bench/big", "revision": sha, "endpoint": hub.endpoint, "cache_dir": str(cache),
                    "verify": True, "reserve_free_space": 0}
            resumed = run_module("hf_snapshot", args, env=env)
            resent = hub.bytes_sent() - total
            shutil.rmtree(cache)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    best_plain, best_module = min(plain), min(module_s)

    def rate(seconds):
        return total / seconds / MIB

    print()
    print(f"payload                    {opts.files} x {opts.size_mib} MiB = {total / MIB:.0f} MiB")
    print(f"plain parallel HTTP fetch  best {best_plain:.2f} s  ({rate(best_plain):.0f} MiB/s)  runs {plain}")
    print(f"hf_snapshot download       best {best_module:.2f} s  ({rate(best_module):.0f} MiB/s)  runs {module_s}")
    print(f"throughput ratio           {best_plain / best_module:.2f}  (target >= 0.9)")
    print(f"hf_snapshot wall clock     {[round(w, 2) for w in wall]} s (Ansible start-up and module packing "
          f"included)")
    print(f"verify pass                hashed {verify_s} bytes")
    print(f"complete rerun             {rerun_wall:.2f} s wall, {rerun_requests} HTTP requests, "
          f"changed={rerun.changed}, hashed {rerun.get('bytes_verified')} bytes")
    print(f"resume after a cut at 60 % ok={not resumed.failed}; bytes sent twice: {resent} "
          f"({resent / MIB:.1f} MiB; huggingface_hub resumes from its last whole 10 MiB write)")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS of any child      {peak:.0f} MiB (the module and ansible; limit 256 MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
