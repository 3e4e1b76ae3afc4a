#!/usr/bin/env python
"""Build the GPU variant of the project's tiny deterministic test model (head size 64 instead of 32).

    scripts/gpu_proof/build_tiny_gpu.py [--out DIR]   -> prints the model directory
                                                          (default .cache/tiny-model/qwen3-tiny-hd64)

Why a variant: scripts/build_tiny_model.py builds head size 32 because vLLM's CPU attention needs 32...512.
On Hopper vLLM 0.25.1 picks FlashAttention 3, whose kernels are built for head sizes 64, 96, 128, 192
and 256; the recipe that booted vLLM 0.25.1 with TP=2 on the H200 host used head size 64. Everything else - tokenizer, chat template, the six verification
conversations, the bf16 greedy-match stopping rule, verification.json - is build_tiny_model.py's own
code: this wrapper only changes the one config value, so the GPU model memorises exactly the prompts the
verify checks send.

Needs torch + transformers like build_tiny_model.py (re-runs itself with the CPU vLLM venv's Python).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAD_DIM = 64


def _load_builder():
    spec = importlib.util.spec_from_file_location("build_tiny_model", REPO / "scripts" / "build_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, help="model directory (default .cache/tiny-model/qwen3-tiny-hd64)")
    args = parser.parse_args(argv)
    builder = _load_builder()
    try:
        import transformers  # pylint: disable=import-outside-toplevel
    except ImportError:
        if builder.VLLM_VENV_PYTHON.exists() and Path(sys.prefix).resolve() != builder.VLLM_VENV_PYTHON.parent.parent.resolve():
            import os  # pylint: disable=import-outside-toplevel

            os.execv(str(builder.VLLM_VENV_PYTHON), [str(builder.VLLM_VENV_PYTHON), __file__, *sys.argv[1:]])
        sys.exit("build_tiny_gpu: needs torch + transformers; run scripts/build_vllm_cpu.sh 0.27.1 first")

    original = transformers.Qwen3Config

    def qwen3_config(**kwargs):
        # build_tiny_model._train imports Qwen3Config from transformers at call time: this is the one override.
        kwargs["head_dim"] = HEAD_DIM
        return original(**kwargs)

    transformers.Qwen3Config = qwen3_config
    out = (args.out or builder.CACHE / "qwen3-tiny-hd64").resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        info = builder.build(out)
    finally:
        transformers.Qwen3Config = original
    config = json.loads((out / "config.json").read_text())
    if config.get("head_dim") != HEAD_DIM:
        sys.exit("build_tiny_gpu: config.json head_dim is %r, expected %d" % (config.get("head_dim"), HEAD_DIM))
    print("build_tiny_gpu: %s in %.1f s (%d steps, %d parameters, head_dim %d)"
          % (out, info["seconds"], info["steps"], info["parameters"], HEAD_DIM), file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
