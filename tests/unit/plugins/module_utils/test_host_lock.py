"""The host-local writer lock (module_utils/host_lock): one holder at a time, a timeout that names the lock file,
and a lock that dies with its holder (a crashed run blocks nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils.host_lock import (
    HostLockTimeout,
    host_lock,
    lock_path,
)

# tests/conftest.py puts this on sys.path for pytest; the holder processes below need it on their own.
COLLECTIONS = Path(__file__).resolve().parents[4] / ".cache" / "collections"

HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[3])
    from ansible_collections.pairserve.llm.plugins.module_utils.host_lock import host_lock
    with host_lock(sys.argv[1], dirs=(sys.argv[2],)):
        print("held", flush=True)
        time.sleep(float(sys.argv[4]))
""")


def start_holder(lock_dir, name, seconds):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, name, str(lock_dir), str(COLLECTIONS), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_names_map_to_one_file_per_name(tmp_path):
    first = lock_path("gpustack-backend-versions http://a:30080 vLLM", (str(tmp_path),))
    assert first == lock_path("gpustack-backend-versions http://a:30080 vLLM", (str(tmp_path),))
    assert first != lock_path("gpustack-backend-versions http://b:30080 vLLM", (str(tmp_path),))
    assert os.path.dirname(first) == str(tmp_path)


def test_no_writable_directory_is_an_error(tmp_path):
    with pytest.raises(HostLockTimeout, match="no writable lock directory"):
        lock_path("x", (str(tmp_path / "absent"),))


def test_a_second_run_waits_then_times_out_naming_the_file(tmp_path):
    holder = start_holder(tmp_path, "versions", 30)
    try:
        started = time.monotonic()
        with pytest.raises(HostLockTimeout, match=r"pairserve-[0-9a-f]{16}\.lock for more than 1 s"):
            with host_lock("versions", timeout=1.0, poll=0.05, dirs=(str(tmp_path),)):
                pytest.fail("the lock was taken while another process held it")
        assert time.monotonic() - started >= 1.0
        with host_lock("other", timeout=1.0, dirs=(str(tmp_path),)):
            pass  # another name is another lock
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_releases_the_lock(tmp_path):
    holder = start_holder(tmp_path, "versions", 30)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with host_lock("versions", timeout=2.0, dirs=(str(tmp_path),)) as path:
        assert os.path.exists(path) and os.path.getsize(path) == 0


def test_turns_are_taken_in_order(tmp_path):
    holder = start_holder(tmp_path, "versions", 0.5)
    try:
        with host_lock("versions", timeout=10.0, poll=0.05, dirs=(str(tmp_path),)):
            assert holder.poll() is not None or holder.wait(timeout=5) == 0
    finally:
        holder.kill()
        holder.wait()
