"""A real vLLM (CPU build) serving the tiny Qwen3 test model: the stand-in for a GPU replica that the
integration tests (through tests/support/vllm_server.py's fixtures) and the benchmarks start.

Interface (everything else in this file is detail):

    # conftest.py of a test directory: make the session fixtures visible there
    from support.vllm_server import lab_vllm, vllm_servers  # noqa: F401  pylint: disable=unused-import

    def test_chat(lab_vllm):                   # one shared server for the whole session
        lab_vllm.base_url                      # "http://127.0.0.1:<port>"; OpenAI API under /v1
        lab_vllm.model                         # served model name ("qwen3-tiny"): send it as "model"
        lab_vllm.chat(messages, **body)        # POST /v1/chat/completions -> requests.Response
        lab_vllm.log_path                      # boot + request log (KV cache size lines etc.)
        lab_vllm.argv, lab_vllm.boot_seconds, lab_vllm.rss_mib()

    def test_two_speeds(vllm_servers):         # factory: start more servers, all stopped at session end
        fast = vllm_servers(name="fast")
        slow = vllm_servers(name="slow", max_num_seqs=1, threads_bind="0")

        broken = vllm_servers(name="short", profile={"max_model_len": 1024})
        # keyword arguments: name, model_dir (default tiny_model()), profile (overrides of the lab profile),
        # max_num_seqs, threads_bind (VLLM_CPU_OMP_THREADS_BIND, default all CPUs), version (default lab/pins.py SERVE_VLLM)

    make_server(log_dir, **same keywords)      # a configured, not started VllmServer (.start() / .stop())
    free_port()                                # a free port (tests/support/ports.py: below the ephemeral range)
    verification_checks()                      # the tiny model's verification.json (prompts + expected answers)
    tiny_model(random=False, vision=False)     # builds/returns .cache/tiny-model/qwen3-tiny[-random] or qwen2_5-vl-tiny

The server runs `python -m vllm.entrypoints.openai.api_server` from the venv that serves its vLLM version on this
CPU (lab/pins.py SERVE_VLLM: scripts/build_vllm_cpu.sh; 0.25.1, the lab's pin, over its own torch 2.11 and torchvision:
scripts/build_vllm_cpu_serve.sh) on 127.0.0.1 and a free port, with the argv that
pairserve.llm.vllm_args renders for the lab inventory's `lab` profile (lab/profile.py; plus --model/--served-model-name/--host/--port).
Readiness means a real chat completion answered 200 (/health proves nothing: the seed's lesson).
Stop is by the process group this module created: SIGTERM, wait, SIGTERM again (a vLLM still starting
may ignore the first), then SIGKILL.
Cost per server on 2 cores: ~35-55 s boot (up to 3 min when the machine is busy), ~1.35 GiB RSS.
The lab profile's argv is followed by `--distributed-executor-backend uni` (and VLLM_ENABLE_V1_MULTIPROCESSING=0):
one process instead of three, each of which would import torch + vLLM again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from lab.pins import SERVE_VLLM
from support.ports import free_port
from lab.profile import lab_profile, lab_replica_env

REPO = Path(__file__).resolve().parents[1]
VLLM_SERVE_VERSION = SERVE_VLLM  # the pins files own it (lab/pins.py says which one and why)
BOOT_TIMEOUT_S = float(os.environ.get("PAIRSERVE_VLLM_BOOT_TIMEOUT", "300"))

if str(REPO / ".cache" / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.pairserve.llm.plugins.module_utils.vllm_args import render  # noqa: E402  pylint: disable=wrong-import-position


def vllm_python(version: str = VLLM_SERVE_VERSION) -> Path:
    """The CPU vLLM venv's interpreter (scripts/build_vllm_cpu.sh); a clear error naming the build command when it is
    missing. For 0.25.1 this is the parser-only build: it renders and parses, it cannot serve (serving_python)."""
    python = REPO / ".cache" / "vllm-cpu" / version / "venv" / "bin" / "python"
    if not (python.parent.parent.parent / "stamp").exists():
        raise RuntimeError("vLLM %s CPU venv missing at %s: run `bash scripts/build_vllm_cpu.sh %s` first" % (version, python.parent.parent, version))
    return python


def serving_python(version: str = VLLM_SERVE_VERSION) -> Path:
    """The interpreter of the venv that SERVES ``version`` on this CPU (scripts/build_vllm_cpu_serve.sh says which
    releases need a venv of their own, over their own torch and torchvision); built once, stamped."""
    own = REPO / ".cache" / "vllm-cpu" / ("%s-serve" % version)
    if (own / "stamp").exists():
        return own / "venv" / "bin" / "python"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "build_vllm_cpu_serve.sh"), version], capture_output=True, text=True,
                          check=False, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError("scripts/build_vllm_cpu_serve.sh %s failed (rc %d):\n%s" % (version, proc.returncode, proc.stderr[-4000:]))
    return Path(proc.stdout.strip().splitlines()[-1]) / "bin" / "python"


def tiny_model(random: bool = False, vision: bool = False) -> Path:
    """Build (once, cached) and return a tiny test checkpoint: the Qwen3 one overfit on the verification prompts,
    its untrained twin (random) or the Qwen2.5-VL one that serves images (vision)."""
    if random and vision:
        raise ValueError("tiny_model: random and vision are two different checkpoints; ask for one")
    cmd = [str(vllm_python()), str(REPO / "scripts" / "build_tiny_model.py")] + (["--random"] if random else []) + (["--vision"] if vision else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError("scripts/build_tiny_model.py failed (rc %d):\n%s" % (proc.returncode, proc.stderr[-4000:]))
    return Path(proc.stdout.strip().splitlines()[-1])


def verification_checks(model_dir: Path | None = None) -> dict:
    """verification.json of the tiny model: {"request": {...}, "checks": [{id, messages, tools, expect, ...}]}."""
    return json.loads(((model_dir or tiny_model()) / "verification.json").read_text())


def _group_rss_mib(pgid: int) -> float:
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) != pgid:
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ProcessLookupError):
            continue
    return round(total / 1024, 1)


@dataclass
class VllmServer:
    """One running vLLM API server (a process group of our own)."""

    name: str
    model: str
    model_dir: Path
    port: int
    argv: list
    env: dict
    log_path: Path
    proc: subprocess.Popen | None = None
    rpc_dir: Path | None = None
    boot_seconds: float = 0.0
    peak_rss_mib: float = 0.0
    warnings: list = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def rss_mib(self) -> float:
        """Resident memory of the server and its engine processes together."""
        return _group_rss_mib(self.proc.pid) if self.proc and self.proc.poll() is None else 0.0

    def chat(self, messages, timeout: float = 120, **body) -> requests.Response:
        payload = {"model": self.model, "messages": messages}
        payload.update(body)
        return requests.post(self.base_url + "/v1/chat/completions", json=payload, timeout=timeout)

    def start(self, timeout: float = BOOT_TIMEOUT_S) -> "VllmServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # vLLM's ZMQ sockets go to a directory of this server's (its default is /tmp itself, where a killed engine
        # leaves one socket per start); short, as a socket path has at most 107 bytes; removed by stop().
        self.rpc_dir = Path(tempfile.mkdtemp(prefix="vllm-rpc-"))
        self.env = dict(self.env, VLLM_RPC_BASE_PATH=str(self.rpc_dir))
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            # A session of its own: stop() signals exactly this group, nothing another test started.
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                         cwd=str(self.log_path.parent), start_new_session=True)
        deadline = started + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("vLLM server %s exited with %s during boot; log %s:\n%s"
                                   % (self.name, self.proc.returncode, self.log_path, self.log_text()[-6000:]))
            self.peak_rss_mib = max(self.peak_rss_mib, self.rss_mib())
            try:
                # Ready = a real completion answers; /health alone answered 200 where completions failed (the seed).
                resp = self.chat([{"role": "user", "content": "Say hello."}], timeout=30, max_tokens=1, temperature=0)
                if resp.status_code == 200:
                    self.boot_seconds = round(time.monotonic() - started, 1)
                    self.peak_rss_mib = max(self.peak_rss_mib, self.rss_mib())
                    return self
                last = "HTTP %d %s" % (resp.status_code, resp.text[:200])
            except requests.RequestException as exc:
                last = type(exc).__name__
            time.sleep(1)
        self.stop()
        raise RuntimeError("vLLM server %s not ready after %.0f s (last: %s); log %s:\n%s" % (self.name, timeout, last, self.log_path, self.log_text()[-6000:]))

    def stop(self, grace: float = 20) -> None:
        """SIGTERM, wait; SIGTERM again (ignored while starting); then SIGKILL. Only our own process group."""
        try:
            self._stop(grace)
        finally:
            if self.rpc_dir is not None and (self.proc is None or not _group_alive(self.proc.pid)):
                shutil.rmtree(self.rpc_dir, ignore_errors=True)
                self.rpc_dir = None

    def _stop(self, grace: float) -> None:
        if self.proc is None or (self.proc.poll() is not None and not _group_alive(self.proc.pid)):
            return
        pgid = self.proc.pid
        for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _group_alive(pgid):
                try:
                    self.proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
            if not _group_alive(pgid):
                break
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def make_server(log_dir: Path, *, name: str = "lab", model_dir: Path | None = None, profile: dict | None = None,
                max_num_seqs: int | None = None, threads_bind: str | None = None, version: str = VLLM_SERVE_VERSION) -> VllmServer:
    """A configured (not started) server: the lab inventory's profile with ``profile``'s keys over it. threads_bind is
    VLLM_CPU_OMP_THREADS_BIND (default: every CPU of this machine)."""
    model_dir = model_dir or tiny_model()
    overrides = dict(profile or {})
    profile = lab_profile(overrides.pop("name", name), **overrides)
    if max_num_seqs is not None:
        profile["max_num_seqs"] = max_num_seqs
    checkpoint = checkpoint_facts(model_dir)
    rendered = render(profile, version, checkpoint, {}, style="split")
    served = json.loads((model_dir / "verification.json").read_text())["model"]
    port = free_port()
    argv = [str(serving_python(version)), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--served-model-name", served, "--host", "127.0.0.1", "--port", str(port)] + rendered.argv
    # Test-ground boot speed, not part of the lab profile: with one CPU worker there is nothing to distribute,
    # so the worker runs in the engine process; each spawned vLLM process re-imports torch + vLLM (measured on
    # 2 loaded cores: boot 89 s -> 53 s, RSS 1958 -> 1347 MiB).
    argv += ["--distributed-executor-backend", "uni"]
    cpus = os.cpu_count() or 1
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HF_", "CUDA_"))}
    # The lab replicas' own settings for what a CPU is not (TORCH_COMPILE_DISABLE: no compiler in the replica image,
    # and 0.25.1's torch-2.11 sampler compile fails without one), where they are plain values.
    env.update(lab_replica_env())
    env.update(
        # -tp 2 on CPU would need '0|1'; the lab profile is TP 1, bound to the CPUs given here.
        VLLM_CPU_OMP_THREADS_BIND=threads_bind or ("0-%d" % (cpus - 1) if cpus > 1 else "0"),
        VLLM_ENABLE_V1_MULTIPROCESSING="0",  # same reason: one process fewer to spawn
        VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",  # nothing to fetch: the model is local
        HF_HOME=str(log_dir / "hf-home"),
    )
    return VllmServer(name=name, model=served, model_dir=model_dir, port=port, argv=argv, env=env,
                      log_path=log_dir / ("vllm-%s.log" % name), warnings=rendered.warnings)


def checkpoint_facts(model_dir: Path) -> dict:
    """The checkpoint facts vllm_args needs, read from config.json (what the checkpoint role derives on real nodes)."""
    config = json.loads((model_dir / "config.json").read_text())
    layer_types = set(config.get("layer_types") or [])
    return {
        "architecture": (config.get("architectures") or [""])[0],
        "model_type": config.get("model_type"),
        "hybrid": bool(layer_types - {"full_attention", "sliding_attention"}),
        "vision": "vision_config" in config,
        "mtp": bool(config.get("num_nextn_predict_layers") or config.get("mtp_num_hidden_layers")),
        "native_context": config.get("max_position_embeddings"),
        "quantization": (config.get("quantization_config") or {}).get("quant_method"),
    }
