# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read what a vLLM replica said while it booted, and judge whether its context can be served.

A boot is not a stability result (the seed's 0.95 run booted with 10 MiB free and died on the first
34 MiB activation), but the boot log is where vLLM states the numbers that decide whether the profile's
context fits at all: the KV cache size in tokens and the concurrency it allows at the configured
``max_model_len``. The lines parsed here were checked on vLLM 0.25.1 ... 0.33.0 (GPU and CPU builds).

The parser reads line by line from any iterable (a file object streams), keeping only the matches,
so a multi-gigabyte serving log costs no more memory than a short one.
"""

from __future__ import annotations

import ast
import re

# "GPU KV cache size: 268,451,984 tokens" (the CPU build says "CPU KV cache size" or no prefix).
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_KV_MEMORY = re.compile(r"Available KV cache memory: (-?[\d.]+) (GiB|MiB|KiB|B)\b")
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
# "Capturing CUDA graphs (decode, FULL): 100%|..." and "(mixed prefill-decode, PIECEWISE)"; vLLM 0.25.1 on
# the H200 pair printed the mode alone: "Capturing CUDA graphs (PIECEWISE)" (tests/fixtures/vllm-logs/h200-*).
_CUDA_GRAPHS = re.compile(r"Capturing CUDA graphs \((?:([^,()]+), )?([A-Z_]+)\)")
_NO_KV_MEMORY = re.compile(r"No available memory for the cache blocks")
# 0.25 spells it "models's max seq len", later versions "model's": match on what follows.
_SEQ_TOO_LONG = re.compile(
    r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed, which is larger than the available KV cache "
    r"memory \(([\d.]+) GiB\)")
_ESTIMATED_LEN = re.compile(r"the estimated maximum model length is (\d+)")
# "vLLM API server version X" (CPU builds) or "Initializing a V1 LLM engine (vX) with config" (0.25.1 on GPUs).
_VERSION = re.compile(r"vLLM API server version ([\w.+-]+)|Initializing a V1 LLM engine \(v([\w.+-]+)\)")

_UNIT = {"GiB": 1.0, "MiB": 1.0 / 1024, "KiB": 1.0 / 1024 / 1024, "B": 1.0 / 1024 ** 3}


def _int(text):
    return int(text.replace(",", ""))


def _literal(text):
    """vLLM logs the dict with repr(); literal_eval reads it without executing anything."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def parse_boot_log(lines):
    """Parse an iterable of log lines (or one string) into the facts a verify play needs.

    Returns a dict; a key is None when its line never appeared (a log that is cut short, or the
    version does not print it). When a line repeats (a restarted runner appends to the same log),
    the last one wins: it describes the server that is running now.
    """
    if isinstance(lines, str):
        lines = lines.splitlines()
    facts = {
        "version": None,
        "kv_cache_tokens": None,
        "max_concurrency": None,
        "concurrency_tokens_per_request": None,
        "available_kv_cache_gib": None,
        "non_default_args": None,
        "non_default_args_raw": None,
        "cuda_graphs": [],
        "kv_errors": [],
        "estimated_max_model_len": None,
        "lines_read": 0,
    }
    graph_modes = []
    for count, line in enumerate(lines, start=1):
        facts["lines_read"] = count
        if "KV cache" in line or "concurrency" in line:
            match = _KV_TOKENS.search(line)
            if match:
                facts["kv_cache_tokens"] = _int(match.group(1))
            match = _CONCURRENCY.search(line)
            if match:
                facts["concurrency_tokens_per_request"] = _int(match.group(1))
                facts["max_concurrency"] = float(match.group(2))
            match = _KV_MEMORY.search(line)
            if match:
                facts["available_kv_cache_gib"] = round(float(match.group(1)) * _UNIT[match.group(2)], 4)
        if "non-default args" in line:
            match = _NON_DEFAULT.search(line)
            if match:
                facts["non_default_args_raw"] = match.group(1)
                facts["non_default_args"] = _literal(match.group(1))
        if "Capturing CUDA graphs" in line:
            match = _CUDA_GRAPHS.search(line)
            if match:
                entry = {"phase": (match.group(1) or "all").strip(), "mode": match.group(2)}
                if entry not in graph_modes:
                    graph_modes.append(entry)
        if _NO_KV_MEMORY.search(line):
            _add_error(facts, {"kind": "no_kv_memory", "line": line.strip()})
        match = _SEQ_TOO_LONG.search(line)
        if match:
            _add_error(facts, {
                "kind": "max_model_len_does_not_fit",
                "max_model_len": int(match.group(1)),
                "needed_gib": float(match.group(2)),
                "available_gib": float(match.group(3)),
                "line": line.strip(),
            })
        match = _ESTIMATED_LEN.search(line)
        if match:
            facts["estimated_max_model_len"] = int(match.group(1))
        match = _VERSION.search(line)
        if match:
            facts["version"] = match.group(1) or match.group(2)
    facts["cuda_graphs"] = graph_modes
    return facts


def _add_error(facts, error):
    # The same ValueError is printed by the engine core and again by the API server's traceback.
    if all(e["kind"] != error["kind"] for e in facts["kv_errors"]):
        facts["kv_errors"].append(error)


def configured_max_model_len(facts):
    """The max_model_len the server was started with, from its own non-default args when logged."""
    args = facts.get("non_default_args") or {}
    value = args.get("max_model_len")
    return int(value) if isinstance(value, int) else None


def assess_context(facts, max_model_len, replica="replica"):
    """Problems (list of str) that stop the profile's context from being served at least once.

    ``max_model_len`` is the profile's context (what clients are promised). Each message names the
    replica, the numbers vLLM printed, and the setting to change. An empty list means the log shows
    room for at least one full-length request.
    """
    problems = []
    knobs = ("raise gpu_memory_utilization in small steps (0.92 held on the seed's 16 GiB cards; 0.95 booted "
             "and then died on a 34 MiB activation), use an fp8 KV cache (kv_cache_dtype), or lower the profile's "
             "max_model_len")
    for error in facts.get("kv_errors", []):
        if error["kind"] == "no_kv_memory":
            problems.append(
                "%s: vLLM found no memory at all for the KV cache ('No available memory for the cache blocks'). "
                "The weights and activations fill the budget: %s." % (replica, knobs))
        elif error["kind"] == "max_model_len_does_not_fit":
            estimate = facts.get("estimated_max_model_len")
            problems.append(
                "%s: one request of max_model_len %d needs %.2f GiB of KV cache but only %.2f GiB is available%s "
                "(this is the seed's 20 MiB story: 0.90 missed by 20 MiB). To fix: %s%s." % (
                    replica, error["max_model_len"], error["needed_gib"], error["available_gib"],
                    "; vLLM estimates %d tokens would fit" % estimate if estimate else "", knobs,
                    " (at most %d)" % estimate if estimate else ""))
    if problems:
        return problems
    tokens = facts.get("kv_cache_tokens")
    concurrency = facts.get("max_concurrency")
    per_request = facts.get("concurrency_tokens_per_request")
    if tokens is None and concurrency is None:
        problems.append(
            "%s: the boot log has no 'KV cache size' or 'Maximum concurrency' line, so nothing shows the "
            "context fits. Give the complete boot log (the instance may still be starting, or the log was "
            "cut before the engine finished profiling memory)." % replica)
        return problems
    if per_request is not None and max_model_len and per_request < max_model_len:
        problems.append(
            "%s: the server was started with max_model_len %d, below the profile's %d: the rendered arguments "
            "did not reach the replica. Re-run the replica role (or roll the instance) so --max-model-len %d "
            "is applied." % (replica, per_request, max_model_len, max_model_len))
    if tokens is not None and max_model_len and tokens < max_model_len:
        problems.append(
            "%s: the KV cache holds %s tokens, fewer than one request of the profile's max_model_len %s. "
            "To fix: %s." % (replica, format(tokens, ","), format(max_model_len, ","), knobs))
    elif concurrency is not None and concurrency < 1.0:
        problems.append(
            "%s: 'Maximum concurrency' is %.2fx for %s tokens per request: not even one full-length request fits. "
            "To fix: %s." % (replica, concurrency, format(per_request or 0, ","), knobs))
    return problems
