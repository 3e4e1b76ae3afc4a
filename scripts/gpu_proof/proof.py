#!/usr/bin/env python
"""Helpers of scripts/gpu_proof.sh: the pieces of the GPU proof that are easier in Python than in shell.

    proof.py render  --pairs MODULE_RESULT.json --model DIR --out DIR   step 2: argv + env of the server
    proof.py verify-args --model DIR --max-model-len N [--boot-log F]    step 3: llm_verify's arguments (JSON)
    proof.py bench-args --report-dir DIR --prefill-tokens N              step 4: llm_bench's arguments (JSON)
    proof.py summary --out DIR                                           figures of steps 1-5 -> summary.md

Everything the server is started with comes from the collection's own code: the pair (CUDA_VISIBLE_DEVICES
as UUIDs) from the gpu_pairs module's result, the flags from plugins/module_utils/vllm_args.render(), the
checkpoint facts from plugins/module_utils/hub.describe_checkpoint(). The only additions are the host's,
listed in HOST_ENV / HOST_ARGS with the reason for each; nothing hand-written stands in for rendered flags.

The collection must be importable as ansible_collections.pairserve.llm: give --collections (a directory
holding ansible_collections/pairserve/llm), default .cache/collections as `make deps` links it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VLLM_VERSION = "0.25.1"

# The GPU profile of the proof: the built-in `text` profile (TP=2, 0.92, 8 sequences, 8192 batched tokens,
# qwen3 / qwen3_coder parsers, prefix caching, no vision tower) with the context lowered to the test model's
# native 8192 tokens; the 98304 of `text` is refused by render() for this checkpoint (see refusals).
PROFILE = {"name": "gpu-proof", "base": "text", "max_model_len": 8192,
           # Host-specific (see HOST_ARGS): passed through the profile's extra_args, so render() still checks
           # that it sets no flag the profile owns and is spelled the way vLLM 0.25.1 accepts.
           "extra_args": ["--disable-custom-all-reduce"]}

HOST_ARGS = {
    "--disable-custom-all-reduce": (
        "vLLM's custom all-reduce kernel fails during CUDA graph capture on this Firecracker VM "
        "(custom_all_reduce.cuh:455 'invalid argument'); NCCL all-reduce works. A bare-metal NVLink pair "
        "would not need it."),
}
HOST_ENV = {
    "VLLM_USE_FLASHINFER_SAMPLER": ("0", "flashinfer is not installed with the PyPI wheel here; vLLM's own "
                                    "PyTorch sampler is used instead (no effect on greedy answers)."),
    "NCCL_NVLS_ENABLE": ("0", "NVLink multicast (NVLS) off: on this shared host it can take the GPUs out of "
                              "service; the host requires it off for every program."),
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": ("1", "the same multicast rule for PyTorch symmetric memory."),
    "NVSHMEM_DISABLE_NVLS": ("1", "the same multicast rule for NVSHMEM."),
}
# What the replica role sets for every replica (roles/replica): not host-specific, listed for completeness.
ROLE_ENV = {
    "CUDA_DEVICE_ORDER": ("PCI_BUS_ID", "CUDA numbers GPUs fastest-first by default; NVML and GPUStack use PCI "
                                        "bus order. The replica pins its pair by UUID and sets PCI order."),
    "PYTORCH_ALLOC_CONF": ("expandable_segments:True", "less fragmentation at 0.92 utilisation (seed setting)."),
}
# What GPUStack's runner adds around backend_parameters: the model path, the name clients send, the port.
RUNNER_ARGS = ("--served-model-name", "--host", "--port")

# The guard rails and version rules of vllm_args.render() that this rendering went through, by flag.
RULES = [
    ("--tensor-parallel-size=2", "pipeline_parallel_size must be 1 (the seed's PP=2 did not boot); TP=2 over the pair"),
    ("--max-model-len=8192", "max_model_len <= the checkpoint's native context (config.json max_position_embeddings 8192)"),
    ("no --language-model-only", "vision: false and the checkpoint has no vision tower: nothing to drop"),
    ("--gpu-memory-utilization=0.92", "refused above 0.95, warned above 0.92 and below 0.92 on 16 GiB cards; 0.92 passes"),
    ("--max-num-seqs=8", "1 is warned (hides an OOM at a 4x throughput cost); 8 is the seed's operating point"),
    ("--reasoning-parser=qwen3 / --tool-call-parser=qwen3_coder",
     "parser names checked against the registries of vLLM 0.25.1"),
    ("--enable-prefix-caching", "the negative spelling would be --no-enable-prefix-caching: --disable-X does not exist "
                                "before 0.33"),
    ("no --mamba-cache-mode", "rendered for hybrid (mamba / linear-attention) checkpoints only: on a dense model "
                              "/health answers and the first completion fails with HTTP 500"),
    ("no --speculative-config", "no MTP: allowed only as an explicit A/B arm and only for a checkpoint with an MTP head"),
    ("FP4 path", "checked only for FP4 checkpoints (this one is bf16); the pair's fp4_path is reported, not used"),
    ("--disable-custom-all-reduce (extra_args)", "extra_args may not set a flag the profile owns; --disable-X is "
                                                 "refused before 0.33 only for --enable-X flags, which this is not"),
]


def _collection(path):
    sys.path.insert(0, str(Path(path).resolve()))
    # pylint: disable=import-outside-toplevel
    from ansible_collections.pairserve.llm.plugins.module_utils import hub, vllm_args, vllm_log
    return hub, vllm_args, vllm_log


def _write(path, data):
    path = Path(path)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def _pairs_fact(module_result):
    data = json.loads(Path(module_result).read_text())
    facts = data.get("ansible_facts", {}).get("pairserve_gpu") or data.get("pairserve_gpu") or data
    if not facts.get("pairs"):
        sys.exit("proof render: %s holds no pairs (gpu_pairs failed?): %s" % (module_result, data.get("msg")))
    return facts


def cmd_render(args):
    hub, vllm_args, dummy = _collection(args.collections)
    gpu = _pairs_fact(args.pairs)
    pair = gpu["pairs"][0]
    checkpoint = hub.describe_checkpoint(str(args.model))
    rendered = vllm_args.render(PROFILE, VLLM_VERSION, checkpoint, pair, style="equals")
    refusals = {}
    for name in ("text", "multimodal"):
        try:
            vllm_args.render(name, VLLM_VERSION, checkpoint, pair)
            refusals[name] = None
        except vllm_args.VllmArgsError as exc:
            refusals[name] = str(exc)
    env = {"CUDA_VISIBLE_DEVICES": pair["cuda_visible_devices"]}
    env.update({k: v for k, (v, dummy) in ROLE_ENV.items()})
    env.update({k: v for k, (v, dummy) in HOST_ENV.items()})
    runner = [str(args.model), "--served-model-name", args.served_name, "--host", "127.0.0.1", "--port", str(args.port)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "vllm_version": VLLM_VERSION,
        "profile_input": PROFILE,
        "profile_resolved": rendered.profile,
        "checkpoint_facts": checkpoint,
        "pair": {k: pair.get(k) for k in ("name", "uuids", "bus_ids", "cuda_visible_devices", "memory_total_mib",
                                          "compute_capability", "architecture", "fp4_path", "link", "p2p_read")},
        "rendered_argv": rendered.argv,
        "render_warnings": rendered.warnings,
        "rules_applied": [{"flag": f, "rule": r} for f, r in RULES],
        "builtin_profiles_on_this_checkpoint": refusals,
        "host_additions": {
            "args": [{"arg": k, "why": v} for k, v in HOST_ARGS.items()],
            "env": [{"name": k, "value": v, "why": why} for k, (v, why) in HOST_ENV.items()],
        },
        "replica_role_env": [{"name": k, "value": v, "why": why} for k, (v, why) in ROLE_ENV.items()],
        "runner_args": {"args": runner, "why": "what GPUStack's runner adds around backend_parameters "
                                               "(model path, served model name, address, port)"},
        "env": env,
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model"] + runner + rendered.argv,
    }
    _write(out / "argv.json", record)
    (out / "server-argv.txt").write_text("\n".join(record["command"][3:]) + "\n", encoding="utf-8")
    (out / "server-env.txt").write_text("".join("%s=%s\n" % kv for kv in env.items()), encoding="utf-8")
    print(" ".join(record["command"]))
    return 0


def cmd_verify_args(args):
    checks = {c["id"]: c for c in json.loads((Path(args.model) / "verification.json").read_text())["checks"]}
    reasoning, tool = checks["reasoning"], checks["tool_paris"]
    # The same mapping roles/verify/tasks/preflight.yml makes from verification.json.
    spec = {
        "base_url": args.base_url,
        "model": args.served_name,
        "name": "gpu-proof-tp2",
        "checks": ["text", "tool_call", "context", "token_count"],
        "max_model_len": args.max_model_len,
        "text": {"max_tokens": 4096, "reasoning_effort": "medium", "messages": reasoning["messages"],
                 "expect_content": reasoning["expect"]["content"], "expect_reasoning": reasoning["expect"]["reasoning"]},
        "tool_call": {"messages": tool["messages"], "tools": tool["tools"],
                      "expect_name": tool["expect"]["tool_calls"][0]["name"],
                      "expect_arguments": tool["expect"]["tool_calls"][0]["arguments"]},
        "token_count": {"messages": reasoning["messages"], "reference": reasoning["prompt_tokens"]},
        "timeout": 120,
    }
    if args.boot_log:
        spec["boot_log_path"] = args.boot_log
    print(json.dumps(spec))
    return 0


def cmd_bench_args(args):
    spec = {
        "targets": [{"name": "gpu-proof-tp2", "base_url": args.base_url, "model": args.served_name, "kind": "replica"}],
        "label": "h200-tp2", "arm": "baseline", "decode_tokens": 256, "ignore_eos": True,
        "single_stream_requests": 3, "concurrency": 8, "rounds": 2, "sweep": [1, 2, 4, 8, 16],
        "prefill_tokens": args.prefill_tokens, "prefix_cache": True, "timeout": 300,
        "report_dir": args.report_dir, "plot": True,
    }
    print(json.dumps(spec))
    return 0


def _load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def cmd_summary(args):
    dummy, dummy2, vllm_log = _collection(args.collections)
    out = Path(args.out)
    lines = ["# GPU proof: vLLM %s, TP=2 on one H200 pair" % VLLM_VERSION, ""]
    timing = _load(out / "timing.json") or {}
    pairs = _load(out / "gpu_pairs.json") or {}
    gpu = pairs.get("ansible_facts", {}).get("pairserve_gpu", {})
    for pair in gpu.get("pairs", []):
        lines.append("- pair: %s x2, link %s, CUDA_VISIBLE_DEVICES=%s" % (pair.get("name"), pair.get("link"),
                                                                          pair.get("cuda_visible_devices")))
    boot = {}
    log = out / "serve.log"
    if log.exists():
        with open(log, encoding="utf-8", errors="replace") as handle:
            boot = vllm_log.parse_boot_log(handle)
        lines.append("- boot: %s s to /health; KV cache %s tokens; maximum concurrency %sx at %s tokens; CUDA graphs %s"
                     % (timing.get("boot_s"), boot.get("kv_cache_tokens"), boot.get("max_concurrency"),
                        boot.get("concurrency_tokens_per_request"),
                        ", ".join("%s %s" % (g["phase"], g["mode"]) for g in boot.get("cuda_graphs", []))))
    verify = _load(out / "verify.json") or {}
    for check in verify.get("checks", []):
        verdict = "ok" if check.get("ok") else "FAILED"
        lines.append("- verify %s: %s (HTTP %s) %s" % (check.get("check"), verdict, check.get("status"), check.get("message")))
    bench = _load(out / "bench.json") or {}
    for target in bench.get("results", []):
        m = target.get("measurement") or target
        single = m.get("single_stream", {})
        conc = m.get("concurrency", {})
        pre = m.get("prefill", {})
        cache = m.get("prefix_cache", {})
        lines.append("- bench: decode %s tok/s single stream (TTFT %s s), %s tok/s at concurrency %s, ceiling %s tok/s "
                     "at %s; prefill %s tok/s at %s tokens; prefix cache TTFT cold %s s, warm %s s"
                     % (single.get("decode_tok_s"), single.get("ttft_s"), conc.get("throughput_tok_s"),
                        conc.get("concurrency"), (m.get("sweep") or {}).get("ceiling_tok_s"),
                        (m.get("sweep") or {}).get("ceiling_at"), pre.get("prefill_tok_s"), pre.get("prompt_tokens"),
                        cache.get("cold_ttft_s"), cache.get("warm_ttft_s")))
    lines.append("- timing: %s" % json.dumps(timing, sort_keys=True))
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _write(out / "boot-facts.json", boot)
    print("\n".join(lines))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--collections", default=str(REPO / ".cache" / "collections"),
                        help="directory holding ansible_collections/pairserve/llm")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("render")
    p.add_argument("--pairs", required=True, help="gpu_pairs' module result (ansible --tree output)")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--out", required=True)
    p.add_argument("--served-name", default="gpu-proof")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=cmd_render)
    p = sub.add_parser("verify-args")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--max-model-len", type=int, required=True)
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--served-name", default="gpu-proof")
    p.add_argument("--boot-log")
    p.set_defaults(func=cmd_verify_args)
    p = sub.add_parser("bench-args")
    p.add_argument("--report-dir", required=True)
    p.add_argument("--prefill-tokens", type=int, default=8000)
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--served-name", default="gpu-proof")
    p.set_defaults(func=cmd_bench_args)
    p = sub.add_parser("summary")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_summary)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
