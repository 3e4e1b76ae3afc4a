# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: llm_bench's measurements over streamed chat completions, the route weights derived from them and the
A/B comparison of two measurements.

What is measured and why, from the seed:
- single-stream decode tok/s (64.9 on the 5080 pair, 48.1 on the 4070 Ti SUPER pair);
- throughput at concurrency 8, the production-shaped run the route weights come from (244 vs 177 -> 58/42);
- a concurrency sweep, whose maximum is the replica's ceiling (275 and 220) - a different question;
- prefill tok/s at a long prompt (16K on the real cards: 2,767 and 1,823);
- TTFT of a repeated long context, cold then warm, which is what prefix caching buys (6.1 s -> 0.54 s).
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid

from ansible_collections.pairserve.llm.plugins.module_utils import routes
from ansible_collections.pairserve.llm.plugins.module_utils._bench_stream import stream_chat
from ansible_collections.pairserve.llm.plugins.module_utils._openai_prompts import build_prompt


SHORT_PROMPT = "Write a long story about two machines that share one job."


def fresh_prompt(text=SHORT_PROMPT):
    """``text`` behind a prefix no request has sent before: vLLM's prefix cache would otherwise serve every
    request after the first from cache, and the TTFT measured would be a cache hit's, not a prefill's (the
    instrument benchmark found ours 27 % below `vllm bench serve`'s random prompts before this)."""
    return "Request %s. %s" % (uuid.uuid4().hex[:12], text)


def _payload(model, content, max_tokens, ignore_eos):
    payload = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
               "temperature": 0}
    if ignore_eos:
        # vLLM extension: every request produces exactly max_tokens, so runs are comparable.
        payload["ignore_eos"] = True
    return payload


def _need(result, what):
    if not result["ok"]:
        raise BenchError("%s failed: %s" % (what, result.get("error")), result.get("class"))
    return result


class BenchError(Exception):
    def __init__(self, message, failure_class=None):
        super().__init__(message)
        self.failure_class = failure_class


def single_stream(client, model, decode_tokens, requests, ignore_eos=True):
    runs = [_need(stream_chat(client, _payload(model, fresh_prompt(), decode_tokens, ignore_eos)), "single stream")
            for dummy in range(requests)]
    decode = [r["decode_tok_s"] for r in runs if r["decode_tok_s"]]
    return {"decode_tok_s": round(statistics.median(decode), 2) if decode else None,
            "ttft_s": round(statistics.median(r["ttft_s"] for r in runs), 4),
            "completion_tokens": runs[0]["completion_tokens"], "prompt_tokens": runs[0]["prompt_tokens"],
            "requests": requests}


def concurrent(client, model, concurrency, decode_tokens, rounds, ignore_eos=True):
    """``concurrency`` streams at once, each running ``rounds`` requests back to back.
    Throughput = all completion tokens / wall time of the whole run."""
    results = []
    lock = threading.Lock()

    def worker():
        for dummy in range(rounds):
            res = stream_chat(client, _payload(model, fresh_prompt(), decode_tokens, ignore_eos))
            with lock:
                results.append(res)

    threads = [threading.Thread(target=worker, daemon=True) for dummy in range(concurrency)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - start
    failed = [r for r in results if not r["ok"]]
    if failed:
        raise BenchError("%d of %d requests at concurrency %d failed: %s" % (
            len(failed), len(results), concurrency, failed[0].get("error")), failed[0].get("class"))
    tokens = sum(r["completion_tokens"] for r in results)
    return {"concurrency": concurrency, "throughput_tok_s": round(tokens / wall, 2), "requests": len(results),
            "completion_tokens": tokens, "wall_s": round(wall, 3),
            "ttft_p50_s": round(statistics.median(r["ttft_s"] for r in results), 4)}


def sweep(client, model, levels, decode_tokens, rounds, ignore_eos=True):
    points = [concurrent(client, model, level, decode_tokens, rounds, ignore_eos) for level in levels]
    best = max(points, key=lambda p: p["throughput_tok_s"])
    # The knee: the lowest concurrency within 5 % of the ceiling (more streams only add latency).
    knee = next(p for p in points if p["throughput_tok_s"] >= 0.95 * best["throughput_tok_s"])
    return {"points": points, "ceiling_tok_s": best["throughput_tok_s"], "ceiling_at": best["concurrency"],
            "knee_at": knee["concurrency"]}


def _salted_long_prompt(client, model, tokens):
    """A long prompt no earlier request shares a prefix with: a fresh salt goes first, so prefix caching
    cannot shorten the 'cold' measurement."""
    salt = "Session %s. " % uuid.uuid4().hex
    messages, count, dummy = build_prompt(client, model, tokens, prefix=salt + "Summarise this log. ")
    return messages[0]["content"], count


def prefill(client, model, tokens, ignore_eos=True):
    content, count = _salted_long_prompt(client, model, tokens)
    res = _need(stream_chat(client, _payload(model, content, 1, False)), "prefill at %d tokens" % tokens)
    prompt = res["prompt_tokens"] or count
    return {"prompt_tokens": prompt, "ttft_s": round(res["ttft_s"], 4),
            "prefill_tok_s": round(prompt / res["ttft_s"], 2)}


def prefix_cache(client, model, tokens):
    """TTFT of the same long context twice: cold (first sight), then warm (its prefix is cached)."""
    content, count = _salted_long_prompt(client, model, tokens)
    cold = _need(stream_chat(client, _payload(model, content, 1, False)), "prefix-cache cold request")
    warm = _need(stream_chat(client, _payload(model, content, 1, False)), "prefix-cache warm request")
    return {"prompt_tokens": cold["prompt_tokens"] or count, "cold_ttft_s": round(cold["ttft_s"], 4),
            "warm_ttft_s": round(warm["ttft_s"], 4),
            "speedup": round(cold["ttft_s"] / warm["ttft_s"], 2) if warm["ttft_s"] > 0 else None}


def measure(client, model, settings):
    """Every measurement for one endpoint; settings keys mirror the llm_bench options."""
    out = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    t0 = time.monotonic()
    out["single_stream"] = single_stream(client, model, settings["decode_tokens"], settings["single_stream_requests"],
                                         settings["ignore_eos"])
    out["concurrency"] = concurrent(client, model, settings["concurrency"], settings["decode_tokens"],
                                    settings["rounds"], settings["ignore_eos"])
    if settings["sweep"]:
        out["sweep"] = sweep(client, model, settings["sweep"], settings["decode_tokens"], settings["rounds"],
                             settings["ignore_eos"])
    if settings["prefill_tokens"]:
        out["prefill"] = prefill(client, model, settings["prefill_tokens"])
        if settings["prefix_cache"]:
            out["prefix_cache"] = prefix_cache(client, model, settings["prefill_tokens"])
    out["duration_s"] = round(time.monotonic() - t0, 2)
    return out


# --- weights and comparison ---------------------------------------------------------------------

def weights(throughputs, total=100):
    """Integer route weights proportional to throughput, summing to ``total`` (routes.proportional's rule).

    The seed: 244 and 177 tok/s at concurrency 8 -> 58 and 42. Every replica that answered keeps a
    weight of at least 1 (a weight of 0 takes it out of GPUStack's route)."""
    try:
        return routes.proportional(throughputs, total)
    except ValueError as err:
        raise ValueError("no throughput to derive weights from: every measured value is zero or missing") from err


# (path in a measurement, label, True when higher is better)
METRICS = (
    (("single_stream", "decode_tok_s"), "single-stream decode tok/s", True),
    (("single_stream", "ttft_s"), "single-stream TTFT s", False),
    (("concurrency", "throughput_tok_s"), "throughput at concurrency N tok/s", True),
    (("sweep", "ceiling_tok_s"), "ceiling tok/s (sweep)", True),
    (("prefill", "prefill_tok_s"), "prefill tok/s", True),
    (("prefix_cache", "cold_ttft_s"), "long-context TTFT cold s", False),
    (("prefix_cache", "warm_ttft_s"), "long-context TTFT warm s", False),
)


def metric(measurement, path):
    value = measurement
    for key in path:
        if not isinstance(value, dict) or value.get(key) is None:
            return None
        value = value[key]
    return value


def compare(baseline, candidate, noise=0.05):
    """Per metric: baseline, candidate, relative change and a verdict (improved / regressed / unchanged
    within ``noise``). The seed's rule: a flag must improve the metric it was meant to improve."""
    rows = []
    for path, label, higher in METRICS:
        before, after = metric(baseline, path), metric(candidate, path)
        if before is None or after is None or before == 0:
            continue
        change = (after - before) / before
        if abs(change) <= noise:
            verdict = "unchanged"
        elif (change > 0) == higher:
            verdict = "improved"
        else:
            verdict = "regressed"
        rows.append({"metric": label, "baseline": before, "candidate": after, "change": round(change, 4),
                     "verdict": verdict})
    return rows
