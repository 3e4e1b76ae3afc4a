"""A small repository shaped like the pinned checkpoint (orcarouter/Qwen3.8-27B-Uncensored-NVFP4).

Same file names and the same traps as the real one, at a few MB:
- config.json of a qwen3_5-style hybrid: linear-attention layers between full-attention ones, a vision
  tower, one MTP layer, a 262144-token native context;
- tokenizer.json with `truncation.max_length: 2048` (the 4-bit calibration length that broke image
  requests in the seed) and a vocabulary token spelled "truncation" that a careless patch would hit;
- tokenizer_config.json with `max_length` / `truncation` / `truncation_side` / `stride`;
- preprocessor_config.json, hf_quant_config.json (ModelOpt NVFP4), generation_config.json;
- three real safetensors shards (LFS) and their index.
Two commits: COMMIT_B changes only config.json, so both snapshots share the tokenizer blobs.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct

from support.fakehub import Commit, HubFile, Repo

REPO_ID = "orcarouter/Qwen3.8-27B-Uncensored-NVFP4"
COMMIT_A = hashlib.sha1(b"pairserve checkpoint commit A").hexdigest()
COMMIT_B = hashlib.sha1(b"pairserve checkpoint commit B").hexdigest()
SHARD_BYTES = 2 * 1024 * 1024
SHARDS = 3
LFS_FILES = tuple(f"model-{i:05d}-of-{SHARDS:05d}.safetensors" for i in range(1, SHARDS + 1))

TEXT_LAYERS = 8


def config(hidden_size: int = 5120) -> dict:
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(TEXT_LAYERS)]
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "image_token_id": 248056,
        "video_token_id": 248057,
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen3_5_text",
            "hidden_size": hidden_size,
            "num_hidden_layers": TEXT_LAYERS,
            "layer_types": layer_types,
            "full_attention_interval": 4,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 48,
            "linear_conv_kernel_dim": 4,
            "mtp_num_hidden_layers": 1,
            "max_position_embeddings": 262144,
            "vocab_size": 248320,
        },
        "vision_config": {"model_type": "qwen3_5_vision", "depth": 27, "hidden_size": 1152, "patch_size": 16},
    }


def tokenizer_json() -> str:
    """Pretty-printed like the `tokenizers` library writes it (2-space indent, non-ASCII kept)."""
    vocab = {"<|endoftext|>": 0, "hello": 1, "truncation": 2, "max_length": 3, "Ġwörld": 4}
    doc = {
        "version": "1.0",
        "truncation": {"direction": "Right", "max_length": 2048, "strategy": "LongestFirst", "stride": 0},
        "padding": None,
        "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab,
                  "merges": [["t", "runcation"], ["max", "_length"]]},
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)


def tokenizer_config_json() -> str:
    doc = {
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "max_length": 2048,
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "stride": 0,
        "tokenizer_class": "Qwen2Tokenizer",
        "truncation": True,
        "truncation_side": "right",
        "truncation_strategy": "longest_first",
        "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def hf_quant_config() -> dict:
    return {
        "producer": {"name": "modelopt", "version": "0.37.0"},
        "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                         "exclude_modules": ["lm_head", "model.visual*", "*linear_attn.conv1d*", "mtp*"]},
    }


def safetensors_shard(index: int, size: int = SHARD_BYTES) -> bytes:
    """A valid safetensors file: one U8 tensor of random (incompressible) bytes."""
    payload = random.Random(f"shard-{index}").randbytes(size)
    header = json.dumps({f"model.layers.{index}.weight": {"dtype": "U8", "shape": [size],
                                                          "data_offsets": [0, size]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + payload


def files(hidden_size: int = 5120, shard_bytes: int = SHARD_BYTES) -> dict[str, HubFile]:
    text = {
        "config.json": json.dumps(config(hidden_size), indent=2) + "\n",
        "generation_config.json": json.dumps({"temperature": 1.0, "top_p": 0.95, "top_k": 20}, indent=2) + "\n",
        "hf_quant_config.json": json.dumps(hf_quant_config(), indent=2) + "\n",
        "preprocessor_config.json": json.dumps({"image_processor_type": "Qwen2VLImageProcessorFast",
                                                "patch_size": 16, "temporal_patch_size": 2,
                                                "merge_size": 2}, indent=2) + "\n",
        "tokenizer.json": tokenizer_json(),
        "tokenizer_config.json": tokenizer_config_json(),
        "model.safetensors.index.json": json.dumps(
            {"metadata": {"total_size": SHARDS * shard_bytes},
             "weight_map": {f"model.layers.{i}.weight": LFS_FILES[i - 1] for i in range(1, SHARDS + 1)}},
            indent=2) + "\n",
    }
    result = {path: HubFile(path, body.encode()) for path, body in text.items()}
    for i, name in enumerate(LFS_FILES, start=1):
        result[name] = HubFile(name, safetensors_shard(i, shard_bytes), lfs=True)
    return result


def checkpoint_repo(token: str | None = None, repo_id: str = REPO_ID) -> Repo:
    """The two-commit repository; `main` points at COMMIT_B, tag `v1` at COMMIT_A."""
    files_a = files()
    files_b = dict(files_a)
    files_b["config.json"] = files(hidden_size=5121, shard_bytes=16)["config.json"]
    return Repo(repo_id=repo_id,
                commits={COMMIT_A: Commit(COMMIT_A, files_a), COMMIT_B: Commit(COMMIT_B, files_b)},
                refs={"main": COMMIT_B, "v1": COMMIT_A}, token=token)


def single_shard_repo(repo_id: str, shard_bytes: int) -> Repo:
    """One config plus one LFS shard bigger than huggingface_hub's 10 MiB read chunk (for resume tests)."""
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    content = {"config.json": HubFile("config.json", json.dumps(config(), indent=2).encode()),
               "model.safetensors": HubFile("model.safetensors", safetensors_shard(99, shard_bytes), lfs=True)}
    return Repo(repo_id=repo_id, commits={commit: Commit(commit, content)}, refs={"main": commit})
