"""What the GPUStack module tests register: a checkpoint directory no backend reads, and gpustack_model arguments
for a replica pinned to GPUs of the tier's worker. Shared by tests/integration/gpustack and tests/integration/faults."""

from __future__ import annotations

import json
from pathlib import Path

from lab import pins


def config_only_checkpoint(path: Path) -> str:
    """A directory the local worker can see; no backend runs in these tests, so config.json is enough."""
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}))
    return str(path)


def model_args(server, checkpoint: str, name: str, gpus=(0,), **extra) -> dict:
    """gpustack_model's arguments for replica ``name`` on GPUs ``gpus`` of the tier's worker, the lab's pinned vLLM;
    ``extra`` adds or replaces arguments."""
    args = {**server.key_args, "name": name, "cluster": server.cluster_name, "local_path": checkpoint,
            "backend_version": pins.VLLM, "gpu_ids": [f"{server.worker_name}:cuda:{i}" for i in gpus],
            "backend_parameters": ["--max-model-len", "4096", "--gpu-memory-utilization", "0.92"]}
    args.update(extra)
    return args
