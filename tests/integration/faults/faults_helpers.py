"""What the fault suite shares: modules run as plain processes (so a SIGKILL hits the module itself, and a kill
cycle costs no Ansible start-up), the debris check, a proxy that breaks GPUStack mid-request, the printed counts."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.checkpoint_repo import config, tokenizer_config_json, tokenizer_json
from support.fakehub import Commit, HubFile, Repo
from support.forwarding_proxy import Forwarded, ForwardingProxy

REPO = Path(__file__).resolve().parents[3]
COLLECTIONS = REPO / ".cache" / "collections"
# The modules' Python: the test venv, which holds the same pinned huggingface_hub (constraints.txt) as the node
# venv the checkpoint role runs them with, plus ansible-core for AnsibleModule (a node gets it inside AnsiballZ).
MODULE_PYTHON = sys.executable
MiB = 1024 * 1024
# huggingface_hub 2.4 writes a download in pieces of this size (constants.DOWNLOAD_CHUNK_SIZE): what a kill can
# cost at most is the piece it held in memory.
HUB_WRITE_UNIT = 10 * MiB
# Seeded, printed, overridable: a failing sequence of delays can be replayed with PAIRSERVE_FAULT_SEED.
SEED = int(os.environ.get("PAIRSERVE_FAULT_SEED", "2026"))

# Names a crash may leave: partial downloads, temp files of an atomic write, our swap-in links, the client's probes.
DEBRIS_RE = re.compile(r"(\.incomplete$|\.tmp$|\.pairserve-|^tmp_[0-9a-f-]{36}$|^tmp[a-z0-9_]{8}$)")

# The local hub's repositories of the suite.
SHARD_REPO = "pairserve-test/fault-shard"
SHARD_BYTES = 24 * 1024 * 1024  # two whole 10 MiB write units and a rest: a kill can keep 0, 10 or 20 MiB
TOKENIZER_REPO = "pairserve-test/fault-tokenizer"
TOKENIZER_VOCAB = 40_000  # a tokenizer.json of about 2 MB: a write of milliseconds, long enough to hit


def big_tokenizer_json(vocab_size: int = TOKENIZER_VOCAB) -> str:
    """The checkpoint's tokenizer.json (truncation.max_length 2048 and its traps) with a vocabulary of real size."""
    doc = json.loads(tokenizer_json())
    vocab = doc["model"]["vocab"]
    for i in range(len(vocab), vocab_size):
        vocab[f"\u0120tok{i:06d}"] = i
    doc["model"]["merges"] += [[f"t{i}", f"ok{i}"] for i in range(vocab_size // 2)]
    return json.dumps(doc, indent=2, ensure_ascii=False)


def tokenizer_repo() -> Repo:
    commit = hashlib.sha1(TOKENIZER_REPO.encode()).hexdigest()
    content = {
        "config.json": HubFile("config.json", json.dumps(config(), indent=2).encode()),
        "tokenizer.json": HubFile("tokenizer.json", big_tokenizer_json().encode(), lfs=True),
        "tokenizer_config.json": HubFile("tokenizer_config.json", tokenizer_config_json().encode()),
    }
    return Repo(repo_id=TOKENIZER_REPO, commits={commit: Commit(commit, content)}, refs={"main": commit})


# Figures of the whole suite, printed at the end of the run by conftest.pytest_terminal_summary.
COUNTS: dict[str, dict] = {}


def rng(name: str) -> random.Random:
    """One seeded generator per test, so one test's draws do not depend on which others ran."""
    return random.Random(f"{SEED}:{name}")


# -- modules as processes ------------------------------------------------------------------------------------

def module_cmd(module: str, args: dict, check: bool = False) -> list[str]:
    params = dict(args)
    if check:
        params["_ansible_check_mode"] = True
    return [MODULE_PYTHON, "-m", f"ansible_collections.pairserve.llm.plugins.modules.{module}",
            json.dumps({"ANSIBLE_MODULE_ARGS": params})]


def module_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(COLLECTIONS)
    env.update(extra or {})
    return env


def start_module(module: str, args: dict, env: dict | None = None) -> subprocess.Popen:
    """The module in a session of its own (its process group is its PID): killed by PID, never by name."""
    return subprocess.Popen(module_cmd(module, args), env=module_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def result_of(proc: subprocess.Popen, timeout: float = 180) -> dict:
    out, err = proc.communicate(timeout=timeout)
    try:
        result = json.loads(out.decode())
    except ValueError as exc:
        raise AssertionError(f"module printed no JSON (rc {proc.returncode}):\n{out.decode()}\n{err.decode()}") from exc
    result["_rc"] = proc.returncode
    result["_stderr"] = err.decode()
    return result


def run_module(module: str, args: dict, env: dict | None = None, check: bool = False, timeout: float = 180) -> dict:
    proc = subprocess.Popen(module_cmd(module, args, check), env=module_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        return result_of(proc, timeout)
    finally:
        kill(proc)


def kill(proc: subprocess.Popen) -> bool:
    """SIGKILL the module's process group if it still runs; True when this call killed it."""
    if proc.poll() is not None:
        return False
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    proc.communicate(timeout=30)
    return True


def client_backlog(server_port: int) -> int:
    """Bytes the kernel holds for clients of 127.0.0.1:`server_port` that they have not read yet (the rx_queue of
    their established sockets in /proc/net/tcp)."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == server_port:
                total += int(fields[4].split(":")[1], 16)
    return total


def drain_then_kill(hub, proc: subprocess.Popen, timeout: float = 5.0) -> bool:
    """Kill the module mid-transfer with nothing in flight: the hub stops sending, the client reads what its socket
    still holds, then SIGKILL. What the kill costs is then exactly what the client process held in memory (a real
    crash may also lose what sat in the kernel's socket buffers, which no client can keep)."""
    hub.pause_bodies()
    try:
        deadline = time.monotonic() + timeout
        while client_backlog(hub.cdn_port) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(0.01)  # the last read reaches the client's own buffer
        return kill(proc)
    finally:
        hub.continue_bodies()


# -- what is on disk ---------------------------------------------------------------------------------------------

def tree(root: Path) -> set[str]:
    """Every entry below root (files, links, directories) as relative paths."""
    found = set()
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(base, name), root))
    return found


def debris(root: Path, reference: set[str]) -> list[str]:
    """Entries a clean, uninterrupted run does not leave, plus anything named like crash leftovers."""
    now = tree(root)
    extra = now - reference
    named = {p for p in now if DEBRIS_RE.search(os.path.basename(p))}
    return sorted(extra | named)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(MiB), b""):
            digest.update(chunk)
    return digest.hexdigest()


def record(test: str, figures: dict) -> None:
    COUNTS[test] = figures
    print(f"[faults] {test}: " + ", ".join(f"{k}={v}" for k, v in figures.items()), flush=True)


# -- GPUStack broken mid-request ---------------------------------------------------------------------------------

class FaultProxy(ForwardingProxy):
    """The pass-through proxy to GPUStack on 127.0.0.1 (support/forwarding_proxy.py) that runs a fault at a chosen
    request.

    `fault(method, path, index)` is called for every request before it is forwarded and returns None (forward
    as usual), "before" (run `action` first, then forward) or "during" (forward the request, run `action` after
    `delay` seconds whether or not GPUStack answered, and close the client's connection without an answer: a
    server that died with the request in flight). When GPUStack cannot be reached the client's connection is
    closed without an answer, as a dead server's would be.
    """

    def __init__(self, upstream: str, fault, action, delay: float = 0.0):
        self.fault, self.action, self.delay = fault, action, delay
        self.answered_before_fault: bool | None = None
        super().__init__(upstream)

    def exchange(self, conn: http.client.HTTPConnection, request: Forwarded):
        when = self.fault(request.method, request.path, request.index)
        if when == "before":
            self.action()
        if when != "during":
            return super().exchange(conn, request)
        conn.request(request.method, request.target, body=request.body, headers=request.headers)
        time.sleep(self.delay)
        self.action()
        try:
            conn.getresponse().read()
            self.answered_before_fault = True
        except (OSError, http.client.HTTPException):
            self.answered_before_fault = False
        return None
