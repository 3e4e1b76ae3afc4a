#!/usr/bin/env python
"""Make an NVFP4 copy of the tiny hybrid Qwen3.5 checkpoint offline with llm-compressor (PyPI).

    PYTHONPATH=<llmcompressor + datasets> scripts/gpu_proof/quantize_tiny_hybrid_nvfp4.py \
        [--model DIR] [--out DIR] [--scheme NVFP4|NVFP4A16]
    -> prints the output directory (default .cache/tiny-model/qwen3_5-tiny-hybrid-nvfp4)

The input is scripts/gpu_proof/build_tiny_hybrid.py's bf16 checkpoint. llm-compressor's `oneshot` applies a
QuantizationModifier with the NVFP4 preset (FP4 E2M1 weights and activations in groups of 16, FP8 group
scales, one FP32 global scale per tensor) to the Linear layers of the language model and saves the
compressed-tensors format (`nvfp4-pack-quantized`), which vLLM reads from config.json's
quantization_config. Activation global scales need calibration: 16 short chat prompts rendered with the
checkpoint's own chat template stand in for a data set (nothing can be downloaded; the weights are random
anyway). `--scheme NVFP4A16` makes the weight-only variant without calibration.

Left in bf16, as vLLM's FP4 kernels need them to be: the vision tower, lm_head and the Gated-DeltaNet
projections (their in_proj_b / in_proj_a have 4 output rows; Marlin's FP4 path, what a Hopper GPU uses, wants
output sizes in multiples of 64). What is quantized: the full-attention projections and every MLP.

Needs llmcompressor 0.14 (+ compressed-tensors 0.19, accelerate, datasets) on top of torch/transformers;
the CPU vLLM 0.25.1 venv's Python with those on PYTHONPATH works (llm-compressor is not on the GPU host).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "tiny-model"
IGNORE = ["lm_head", "re:.*visual.*", "re:.*linear_attn.*"]
PROMPTS = [
    "Say the verification phrase.", "What is the weather like in Paris?", "Describe the image.",
    "How many GPUs does a pair have?", "Summarise the last camera event.", "Hello, how are you today?",
    "List three colours.", "What does prefix caching save?", "Translate 'good morning' into French.",
    "Which port does the replica listen on?", "Count from one to five.", "Name a river in Germany.",
    "Why is the sky blue?", "Write one line of Python.", "What is 12 times 7?", "Reply with one word.",
]
COPY = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "preprocessor_config.json",
        "video_preprocessor_config.json", "generation_config.json")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", type=Path, default=CACHE / "qwen3_5-tiny-hybrid")
    parser.add_argument("--out", type=Path, default=CACHE / "qwen3_5-tiny-hybrid-nvfp4")
    parser.add_argument("--scheme", default="NVFP4", choices=("NVFP4", "NVFP4A16"))
    args = parser.parse_args(argv)
    # pylint: disable=import-outside-toplevel
    import compressed_tensors
    import llmcompressor
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    t0 = time.time()
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=torch.bfloat16).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    recipe = QuantizationModifier(targets="Linear", scheme=args.scheme, ignore=IGNORE)
    kwargs = {}
    if args.scheme == "NVFP4":
        texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
                 for p in PROMPTS]
        data = Dataset.from_dict({"input_ids": [tok(t)["input_ids"] for t in texts]})
        kwargs = {"dataset": data, "num_calibration_samples": len(PROMPTS), "max_seq_length": 64,
                  "pipeline": "basic", "processor": tok}
    oneshot(model=model, recipe=recipe, **kwargs)
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, save_compressed=True)
    for name in COPY:
        if (args.model / name).exists():
            shutil.copy2(args.model / name, out / name)
    cfg = json.loads((out / "config.json").read_text())
    qcfg = cfg.get("quantization_config") or {}
    if qcfg.get("format") != "nvfp4-pack-quantized":
        sys.exit("quantize: expected format nvfp4-pack-quantized, got %r" % qcfg.get("format"))
    info = {
        "source": str(args.model), "scheme": args.scheme, "ignore": IGNORE,
        "llmcompressor": llmcompressor.__version__, "compressed_tensors": compressed_tensors.__version__,
        "quant_method": qcfg.get("quant_method"), "format": qcfg.get("format"),
        "calibration_prompts": len(PROMPTS) if args.scheme == "NVFP4" else 0,
        "bytes": {p.name: p.stat().st_size for p in sorted(out.glob("*.safetensors"))},
        "seconds": round(time.time() - t0, 1),
    }
    (out / "quantize.json").write_text(json.dumps(info, indent=1) + "\n")
    print("quantize: %s (%s, %.1f s)" % (out, args.scheme, info["seconds"]), file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
