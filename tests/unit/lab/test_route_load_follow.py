"""lab/route_load.py as the rotation scenario runs it: with --follow-key-file a key file replaced while the loop runs
is used from the next request (the loop stands for a client moved to the rotated key); without it the loop keeps
the key it started with, and a server that accepts only the new key fails its requests (so the scenario's
0 failed requests says something)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from support.local_http import JsonStub

REPO = Path(__file__).resolve().parents[3]


def run_loop(tmp_path: Path, follow: bool) -> dict:
    accepted = {"sk-old"}

    def answer(request):
        if request.headers.get("Authorization", "")[len("Bearer "):] not in accepted:
            return 401, {"detail": "Invalid authentication credentials"}
        return 200, {"choices": [{"message": {"role": "assistant", "content": "2"}}]}

    key_file, summary = tmp_path / "key", tmp_path / f"load-{follow}.json"
    key_file.write_text("sk-old\n")
    with JsonStub(answer) as stub:
        cmd = [sys.executable, "-m", "lab.route_load", "--url", f"http://127.0.0.1:{stub.port}", "--model", "qwen",
               "--key-file", str(key_file), "--summary", str(summary), "--concurrency", "1", "--pause", "0.05",
               "--max-seconds", "3"] + (["--follow-key-file"] if follow else [])
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(os.environ, PYTHONPATH=str(REPO)))
        try:
            # As the rotation goes: the new key staged (both accepted), the client moved (the new key written
            # atomically), then the old key retired.
            time.sleep(1)
            accepted.add("sk-new")
            tmp = key_file.with_suffix(".tmp")
            tmp.write_text("sk-new\n")
            os.replace(tmp, key_file)
            time.sleep(0.3)
            accepted.discard("sk-old")
            out = proc.communicate(timeout=30)[0]
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, out
    return json.loads(summary.read_text())


def test_a_loop_that_follows_the_key_file_has_no_failed_request(tmp_path):
    summary = run_loop(tmp_path, follow=True)
    assert summary["ok"] > 5 and summary["failed"] == 0, summary


def test_a_loop_that_keeps_its_first_key_fails_once_the_old_key_is_refused(tmp_path):
    summary = run_loop(tmp_path, follow=False)
    assert summary["failed"] > 0 and "http_401" in summary["failures_by_class"], summary
