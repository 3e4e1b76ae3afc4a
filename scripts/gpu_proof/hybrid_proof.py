#!/usr/bin/env python
"""Helpers of scripts/gpu_proof/serve_hybrid.sh: the hybrid Qwen3.5 checkpoint with the multimodal profile.

    hybrid_proof.py render --model DIR --out DIR [--port N]      the server's argv + env (collection code)
    hybrid_proof.py requests --base-url URL --out FILE            text, image, the image again, text again
    hybrid_proof.py verify-args --model DIR --base-url URL ...    llm_verify's arguments (JSON) for this checkpoint
    hybrid_proof.py jit-gdn --out FILE                            build FlashInfer's GDN prefill JIT module, timed
    hybrid_proof.py bench-args --base-url URL --report-dir DIR    llm_bench's arguments (JSON) for this server
    hybrid_proof.py record --out DIR --label L ...                boot facts + trimmed log lines -> run-L.json

The flags come from plugins/module_utils/vllm_args.render() over hub.describe_checkpoint() of the checkpoint,
with the built-in `multimodal` profile and one inventory-level override: tensor_parallel_size 1, because the
lent machine has one GPU (a site would set the same key in its inventory). Everything else the profile
renders is kept, `--mamba-cache-mode=align` included (rendered because the checkpoint is hybrid).
The host's additions are listed in HOST_ENV with the reason for each; no rendered flag is dropped or changed.

The collection must be importable as ansible_collections.pairserve.llm: give --collections (a directory
holding ansible_collections/pairserve/llm).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

VLLM_VERSION = "0.25.1"
# The multimodal profile as an inventory would override it for a one-GPU host: only the TP size changes.
PROFILE = {"name": "gpu-hybrid", "base": "multimodal", "tensor_parallel_size": 1}
HOST_ENV = {
    "VLLM_USE_FLASHINFER_SAMPLER": ("0", "vLLM's PyTorch sampler: without flashinfer-cubin FlashInfer's sampling "
                                    "kernels would be JIT-compiled too (greedy answers are the same)."),
    "NCCL_NVLS_ENABLE": ("0", "NVLink multicast off (host rule)."),
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": ("1", "NVLink multicast off (host rule)."),
    "NVSHMEM_DISABLE_NVLS": ("1", "NVLink multicast off (host rule)."),
    "HF_HUB_OFFLINE": ("1", "the host reaches nothing; the model is local."),
    "TRANSFORMERS_OFFLINE": ("1", "the host reaches nothing; the model is local."),
    "VLLM_NO_USAGE_STATS": ("1", "no usage reports from an offline host."),
}
ROLE_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
SERVED_NAME = "hybrid"
# Boot-log lines worth keeping (hybrid / mamba cache, attention backends, KV cache, CUDA graphs, FP4 kernels).
KEEP = re.compile(
    r"non-default args|Initializing a V1 LLM engine|[Mm]amba|hybrid|Hybrid|page size|block size|block_size|"
    r"[Aa]ttention backend|Using .*[Bb]ackend|FlashAttention|GDN|[Ll]inear attention|chunked prefill|"
    r"KV cache|Maximum concurrency|cudagraph|CUDA graph|torch\.compile|compilation|init engine|"
    r"Loading weights took|Model loading took|[Ff][Pp]4|Marlin|[Qq]uantiz|compressed.tensors|"
    r"encoder cache|multimodal|[Pp]refix cach|Application startup complete|Starting vLLM|"
    r"Error|error:|Traceback|raise |Exception|WARNING"
)
NOISE = re.compile(r"it/s\]|s/it\]|%\|")


def _collection(path):
    sys.path.insert(0, str(Path(path).resolve()))
    # pylint: disable=import-outside-toplevel
    from ansible_collections.pairserve.llm.plugins.module_utils import hub, vllm_args, vllm_log
    return hub, vllm_args, vllm_log


def _gpu_facts():
    """Facts of the one GPU for render()'s pair argument (gpu_pairs needs a pair; this host has one card)."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
        props = torch.cuda.get_device_properties(0)
        return {"name": props.name, "memory_total_mib": props.total_memory // (1024 * 1024),
                "compute_capability": "%d.%d" % (props.major, props.minor), "count": torch.cuda.device_count()}
    except Exception as exc:  # pylint: disable=broad-except
        return {"error": str(exc)}


def cmd_render(args):
    hub, vllm_args, dummy = _collection(args.collections)
    checkpoint = hub.describe_checkpoint(str(args.model))
    gpu = _gpu_facts()
    pair = {k: gpu[k] for k in ("memory_total_mib", "compute_capability") if k in gpu}
    rendered = vllm_args.render(PROFILE, VLLM_VERSION, checkpoint, pair, style="equals")
    builtin = vllm_args.render("multimodal", VLLM_VERSION, checkpoint, pair, style="equals")
    runner = [str(args.model), "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(args.port)]
    env = dict(ROLE_ENV)
    env.update({k: v for k, (v, dummy) in HOST_ENV.items()})
    record = {
        "vllm_version": VLLM_VERSION,
        "profile_input": PROFILE,
        "profile_resolved": rendered.profile,
        "checkpoint_facts": checkpoint,
        "gpu": gpu,
        "rendered_argv": rendered.argv,
        "render_warnings": rendered.warnings,
        "builtin_multimodal_argv": builtin.argv,
        "host_env": [{"name": k, "value": v, "why": why} for k, (v, why) in HOST_ENV.items()],
        "env": env,
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model"] + runner + rendered.argv,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "argv.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    (out / "server-argv.txt").write_text("\n".join(record["command"][3:]) + "\n", encoding="utf-8")
    (out / "server-env.txt").write_text("".join("%s=%s\n" % kv for kv in env.items()), encoding="utf-8")
    print(" ".join(record["command"]))
    return 0


def _png(width=128, height=96):
    from PIL import Image  # pylint: disable=import-outside-toplevel
    img = Image.new("RGB", (width, height))
    img.putdata([((x * 2) % 256, (y * 2) % 256, (x + y) % 256) for y in range(height) for x in range(width)])
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _metrics(base_url):
    """vLLM's prefix-cache and token counters from /metrics (counters, in tokens)."""
    names = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
             "vllm:generation_tokens_total")
    values = {}
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=30) as resp:
            for line in resp.read().decode("utf-8", "replace").splitlines():
                for name in names:
                    if line.startswith(name + "{") or line.startswith(name + " "):
                        values[name.split(":", 1)[1]] = values.get(name.split(":", 1)[1], 0.0) + float(line.rsplit(" ", 1)[1])
    except Exception as exc:  # pylint: disable=broad-except
        values["error"] = "%s: %s" % (type(exc).__name__, exc)
    return values


def _post(url, body, timeout=120):
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, text = resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode("utf-8", "replace")
    except Exception as exc:  # pylint: disable=broad-except
        status, text = None, "%s: %s" % (type(exc).__name__, exc)
    seconds = round(time.time() - t0, 3)
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    result = {"status": status, "seconds": seconds}
    if isinstance(doc, dict) and doc.get("choices"):
        msg = doc["choices"][0].get("message") or {}
        result.update({"usage": doc.get("usage"), "finish_reason": doc["choices"][0].get("finish_reason"),
                       "content_chars": len(msg.get("content") or ""), "reasoning_chars": len(msg.get("reasoning") or ""),
                       "content": (msg.get("content") or "")[:200], "reasoning": (msg.get("reasoning") or "")[:200]})
    else:
        result["body"] = text[:1500]
    return result


def cmd_requests(args):
    """The first request (its latency is what a user waits for on a fresh server: kernels that were not built
    at boot are built then), an image request, the same image request again (prefix caching: the counters of
    /metrics before and after each show the cached tokens of the repeat), and the text again."""
    url = args.base_url.rstrip("/") + "/v1/chat/completions"
    text = {"model": SERVED_NAME, "max_tokens": 32, "temperature": 0,
            "messages": [{"role": "user", "content": "Say the verification phrase."}]}
    image = {"model": SERVED_NAME, "max_tokens": 16, "temperature": 0,
             "messages": [{"role": "user", "content": [
                 {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _png()}},
                 {"type": "text", "text": "Describe the image."}]}]}
    results = {"metrics_before": _metrics(args.base_url)}
    results["text"] = _post(url, text, timeout=args.first_timeout)
    results["metrics_after_text"] = _metrics(args.base_url)
    results["image"] = _post(url, image)
    results["metrics_after_image"] = _metrics(args.base_url)
    results["image_again"] = _post(url, image)
    results["metrics_after_image_again"] = _metrics(args.base_url)
    # A 448x448 image (196 image tokens): its prompt spans more than one of the 144-token blocks that align mode
    # gives this checkpoint (the 128x96 one, 94 tokens, is shorter than a block, so nothing of it can be cached).
    large = json.loads(json.dumps(image))
    large["messages"][0]["content"][0]["image_url"]["url"] = "data:image/png;base64," + _png(448, 448)
    results["image_large"] = _post(url, large)
    results["metrics_after_image_large"] = _metrics(args.base_url)
    results["image_large_again"] = _post(url, large)
    results["metrics_after_image_large_again"] = _metrics(args.base_url)
    results["text_again"] = _post(url, text)
    for name, first, second in (("image_again", "metrics_after_image", "metrics_after_image_again"),
                                ("image_large_again", "metrics_after_image_large",
                                 "metrics_after_image_large_again")):
        before, after = results[first], results[second]
        if "prefix_cache_hits_total" in before and "prefix_cache_hits_total" in after:
            results[name + "_cached_tokens"] = after["prefix_cache_hits_total"] - before["prefix_cache_hits_total"]
            results[name + "_queried_tokens"] = after["prefix_cache_queries_total"] - before["prefix_cache_queries_total"]
    results["first_request_s"] = results["text"]["seconds"]
    results["image_size"] = [128, 96]
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v.get("status") if isinstance(v, dict) and "status" in v else v for k, v in results.items()
                      if not k.startswith("metrics")}))
    return 0


def cmd_verify_args(args):
    """llm_verify's arguments for this checkpoint, mapped from its verification.json as roles/verify does (and as
    scripts/gpu_proof/proof.py does for the dense model): exact answers when the checkpoint was trained on them,
    the image check with the checkpoint's own preprocessor_config.json, the profile's context."""
    model = Path(args.model)
    spec = {"base_url": args.base_url, "model": SERVED_NAME, "name": args.name, "checks": args.checks.split(","),
            "max_model_len": args.max_model_len, "timeout": args.timeout,
            "image_processor": json.loads((model / "preprocessor_config.json").read_text())}
    ver = model / "verification.json"
    if ver.exists():
        checks = {c["id"]: c for c in json.loads(ver.read_text())["checks"]}
        reasoning, tool = checks["reasoning"], checks["tool_paris"]
        spec["text"] = {"max_tokens": 4096, "reasoning_effort": "medium", "messages": reasoning["messages"],
                        "expect_content": reasoning["expect"]["content"],
                        "expect_reasoning": reasoning["expect"]["reasoning"]}
        spec["tool_call"] = {"messages": tool["messages"], "tools": tool["tools"],
                             "expect_name": tool["expect"]["tool_calls"][0]["name"],
                             "expect_arguments": tool["expect"]["tool_calls"][0]["arguments"]}
        spec["token_count"] = {"messages": reasoning["messages"], "reference": reasoning["prompt_tokens"]}
    if args.boot_log:
        spec["boot_log_path"] = args.boot_log
    print(json.dumps(spec))
    return 0


def cmd_jit_gdn(args):
    """Build (or load from FlashInfer's JIT cache) the GDN prefill module vLLM 0.25.1 uses on Hopper, timed."""
    t0 = time.time()
    record = {"started": t0}
    try:
        # pylint: disable=import-outside-toplevel
        import flashinfer
        from flashinfer.jit import env as jit_env
        from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module
        record.update({"flashinfer": flashinfer.__version__, "jit_dir": str(jit_env.FLASHINFER_JIT_DIR)})
        spec = gen_gdn_prefill_sm90_module()
        record["sources"] = len(spec.sources)
        spec.build_and_load()
        record["ok"] = True
    except Exception as exc:  # pylint: disable=broad-except
        record.update({"ok": False, "error": "%s: %s" % (type(exc).__name__, str(exc)[-3000:])})
    record["seconds"] = round(time.time() - t0, 1)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record)[:2000])
    return 0 if record["ok"] else 1


def cmd_bench_args(args):
    """llm_bench as the bench play runs it (the module's defaults), against the one server; the prefill size
    is the dense TP=2 proof's (8000 tokens), well inside the profile's 65,536."""
    spec = {
        "targets": [{"name": "hybrid-%s" % args.label, "base_url": args.base_url, "model": SERVED_NAME,
                     "kind": "replica"}],
        "label": "h100-hybrid-%s" % args.label, "arm": "baseline", "decode_tokens": 256, "ignore_eos": True,
        "single_stream_requests": 3, "concurrency": 8, "rounds": 2, "sweep": [1, 2, 4, 8, 16],
        "prefill_tokens": args.prefill_tokens, "prefix_cache": True, "timeout": 300,
        "report_dir": args.report_dir, "plot": False,
    }
    print(json.dumps(spec))
    return 0


def _bench_summary(path):
    """llm_bench's result (ansible --tree output): per target its measurements, the run's own figures."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return {"unreadable": path.read_text()[:2000]}
    keep = ("failed", "msg", "results")
    return {k: data[k] for k in keep if k in data}


def _trim(lines, limit=90):
    kept = []
    for line in lines:
        line = line.replace("\r", "").rstrip()
        if not line or NOISE.search(line) or not KEEP.search(line):
            continue
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        kept.append(line[:400])
    return kept[:limit] if len(kept) <= limit else kept[: limit - 20] + ["..."] + kept[-19:]


def _verify_summary(path):
    """llm_verify's result (ansible --tree output), checks kept with their verdicts and figures."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return {"unreadable": path.read_text()[:2000]}
    keep = ("failed", "msg", "failed_checks", "boot_problems", "checks", "boot")
    return {k: data[k] for k in keep if k in data}


def cmd_record(args):
    dummy, dummy2, vllm_log = _collection(args.collections)
    out = Path(args.out)
    log_lines = (out / ("serve-%s.log" % args.label)).read_text(encoding="utf-8", errors="replace").splitlines()
    facts = vllm_log.parse_boot_log(log_lines)
    argv = json.loads((out / ("argv-%s.json" % args.label)).read_text())
    reqs = out / ("requests-%s.json" % args.label)
    verify = out / ("verify-%s.json" % args.label)
    extra = out / ("host-args-%s.txt" % args.label)
    compare = out / ("bench-compare-%s.json" % args.label)
    record = {
        "label": args.label,
        "model": args.model_name,
        "booted": args.health == 1,
        "boot_s": args.boot_s,
        "rendered_argv": argv["rendered_argv"],
        "render_warnings": argv["render_warnings"],
        "command": argv["command"],
        "env": argv["env"],
        "checkpoint_facts": argv["checkpoint_facts"],
        "gpu": argv["gpu"],
        "host_args": [a for a in extra.read_text().split("\n") if a] if extra.exists() else [],
        "requests": json.loads(reqs.read_text()) if reqs.exists() else None,
        "verify": _verify_summary(verify),
        "bench_compare": json.loads(compare.read_text()) if compare.exists() else None,
        "llm_bench": _bench_summary(out / ("bench-%s.json" % args.label)),
        "boot_facts": facts,
        "log_lines": _trim(log_lines),
        "log_tail_on_failure": [] if args.health == 1 else [ln.replace("\r", "")[:400] for ln in log_lines[-40:]],
    }
    (out / ("run-%s.json" % args.label)).write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    kv = facts.get("kv_cache_tokens") if isinstance(facts, dict) else None
    print("record %s: booted=%s boot_s=%s kv=%s" % (args.label, record["booted"], args.boot_s, kv))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--collections", default=".cache/collections")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("render")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--port", type=int, default=8000)
    p = sub.add_parser("requests")
    p.add_argument("--base-url", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--first-timeout", type=float, default=600)
    p = sub.add_parser("verify-args")
    p.add_argument("--model", required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--name", default="hybrid")
    p.add_argument("--checks", default="text,tool_call,images,context,token_count")
    p.add_argument("--max-model-len", type=int, default=65536)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--boot-log")
    p = sub.add_parser("jit-gdn")
    p.add_argument("--out", required=True)
    p = sub.add_parser("bench-args")
    p.add_argument("--base-url", required=True)
    p.add_argument("--report-dir", required=True)
    p.add_argument("--label", default="bf16")
    p.add_argument("--prefill-tokens", type=int, default=8000)
    p = sub.add_parser("record")
    p.add_argument("--out", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--model-name", default="")
    p.add_argument("--health", type=int, default=0)
    p.add_argument("--boot-s", type=int, default=0)
    args = parser.parse_args(argv)
    return {"render": cmd_render, "requests": cmd_requests, "verify-args": cmd_verify_args, "jit-gdn": cmd_jit_gdn,
            "bench-args": cmd_bench_args, "record": cmd_record}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
