# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving measurements over streamed (SSE) chat completions, route weights, A/B comparison, reports.

What is measured and why, from the seed:
- single-stream decode tok/s (64.9 on the 5080 pair, 48.1 on the 4070 Ti SUPER pair);
- throughput at concurrency 8, the production-shaped run the route weights come from (244 vs 177 -> 58/42);
- a concurrency sweep, whose maximum is the replica's ceiling (275 and 220) - a different question;
- prefill tok/s at a long prompt (16K on the real cards: 2,767 and 1,823);
- TTFT of a repeated long context, cold then warm, which is what prefix caching buys (6.1 s -> 0.54 s).
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
import uuid

from ansible_collections.pairserve.llm.plugins.module_utils import openai_probe as probe

SHORT_PROMPT = "Write a long story about two machines that share one job."


def fresh_prompt(text=SHORT_PROMPT):
    """``text`` behind a prefix no request has sent before: vLLM's prefix cache would otherwise serve every
    request after the first from cache, and the TTFT measured would be a cache hit's, not a prefill's (the
    instrument benchmark found ours 27 % below `vllm bench serve`'s random prompts before this)."""
    return "Request %s. %s" % (uuid.uuid4().hex[:12], text)


def stream_chat(client, payload, timeout=None):
    """One streamed chat completion with client-side timing.

    Returns dict: ok, status, ttft_s (first streamed chunk, sent after prefill), total_s, completion_tokens,
    prompt_tokens, decode_tok_s ((tokens - 1) / (last - first token), as vLLM's TPOT counts it), error.
    """
    payload = dict(payload, stream=True, stream_options={"include_usage": True})
    start = time.monotonic()
    handle, failure = client.open(client.base_url + "/v1/chat/completions", payload, timeout=timeout)
    if failure is not None:
        cls, why = probe.classify(failure)
        return {"ok": False, "status": failure.status, "error": why, "class": cls}
    first = last = None
    usage = None
    chunks = 0
    try:
        for raw in _sse_lines(handle):  # SSE: "data: {json}\n\n", ending with "data: [DONE]"
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            event = json.loads(data)
            if event.get("usage"):
                usage = event["usage"]
            if event.get("choices"):
                # Time every chunk that carries a choice, visible text or not: vLLM sends one per engine step,
                # while its reasoning and tool parsers may hold text back and release it in a burst (timing only
                # visible text measured 119x vLLM's own decode rate). The first one leaves after prefill; this is
                # how `vllm bench serve` takes TTFT and TPOT, so the two instruments agree.
                now = time.monotonic()
                if first is None:
                    first = now
                last = now
                chunks += 1
    except (OSError, ValueError) as exc:
        return {"ok": False, "status": 200, "error": "stream broke: %s" % exc, "class": "unavailable"}
    finally:
        handle.close()
    end = time.monotonic()
    if first is None:
        return {"ok": False, "status": 200, "error": "the stream carried no token", "class": "wrong_answer"}
    completion = int((usage or {}).get("completion_tokens") or chunks)
    decode = (completion - 1) / (last - first) if completion > 1 and last > first else None
    return {"ok": True, "status": 200, "ttft_s": first - start, "total_s": end - start,
            "completion_tokens": completion, "prompt_tokens": int((usage or {}).get("prompt_tokens") or 0),
            "decode_tok_s": decode}


def _sse_lines(handle):
    """Lines as soon as they arrive. read1() returns what the socket has (one HTTP chunk); iterating the
    response instead buffered the whole stream here and timed 64 tokens as one burst."""
    reader = getattr(handle, "read1", None) or handle.read
    pending = b""
    while True:
        data = reader(65536)
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line
    if pending:
        yield pending


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
            "completion_tokens": runs[0]["completion_tokens"], "requests": requests}


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
    messages, count, dummy = probe.build_prompt(client, model, tokens, prefix=salt + "Summarise this log. ")
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
    """Integer route weights proportional to throughput, summing to ``total`` (largest remainder).

    The seed: 244 and 177 tok/s at concurrency 8 -> 58 and 42. Every replica that answered keeps a
    weight of at least 1 (a weight of 0 takes it out of GPUStack's route)."""
    names = list(throughputs)
    values = [max(0.0, float(throughputs[n] or 0.0)) for n in names]
    whole = sum(values)
    if whole <= 0:
        raise ValueError("no throughput to derive weights from: every measured value is zero or missing")
    exact = [v * total / whole for v in values]
    floors = [int(x) for x in exact]
    order = sorted(range(len(names)), key=lambda i: exact[i] - floors[i], reverse=True)
    for i in order[: total - sum(floors)]:
        floors[i] += 1
    for i, value in enumerate(values):
        if value > 0 and floors[i] == 0:
            floors[i] = 1
            floors[max(range(len(floors)), key=lambda j: floors[j])] -= 1
    return dict(zip(names, floors))


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


# --- report -------------------------------------------------------------------------------------

def _fmt(value, digits=1):
    if value is None:
        return "-"
    if isinstance(value, float):
        return ("%%.%df" % digits) % value
    return str(value)


def render_markdown(run):
    """The report a person reads at a glance: one table of targets, then weights, sweep and A/B."""
    lines = ["# pairserve bench: %s" % run["label"], "",
             "Run %s, arm `%s`, %d target(s). Decode %d tokens per request%s; concurrency %d; prefill prompt %s "
             "tokens." % (run["started"], run["arm"], len(run["targets"]), run["settings"]["decode_tokens"],
                          " (ignore_eos)" if run["settings"]["ignore_eos"] else "",
                          run["settings"]["concurrency"], run["settings"]["prefill_tokens"] or "-"), "",
             "| target | kind | decode tok/s (1 stream) | TTFT s | tok/s @ c=%d | ceiling tok/s (at c) | prefill tok/s "
             "| long TTFT cold → warm s |" % run["settings"]["concurrency"],
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for target in run["targets"]:
        m = target.get("measurement") or {}
        if target.get("error"):
            lines.append("| %s | %s | failed: %s | | | | | |" % (target["name"], target["kind"], target["error"]))
            continue
        cache = m.get("prefix_cache") or {}
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            target["name"], target["kind"], _fmt(metric(m, ("single_stream", "decode_tok_s"))),
            _fmt(metric(m, ("single_stream", "ttft_s")), 3), _fmt(metric(m, ("concurrency", "throughput_tok_s"))),
            "%s (%s)" % (_fmt(metric(m, ("sweep", "ceiling_tok_s"))), _fmt(metric(m, ("sweep", "ceiling_at"))))
            if m.get("sweep") else "-",
            _fmt(metric(m, ("prefill", "prefill_tok_s"))),
            "%s → %s" % (_fmt(cache.get("cold_ttft_s"), 3), _fmt(cache.get("warm_ttft_s"), 3)) if cache else "-"))
    if run.get("weights"):
        lines += ["", "## Route weights", "",
                  "Proportional to throughput at concurrency %d (the seed's 58/42 came from 244 vs 177 tok/s)%s:"
                  % (run["settings"]["concurrency"], "; applied to route `%s`" % run["route"]
                     if run.get("weights_applied") else "; not applied (set pairserve_bench_apply_weights: true)"),
                  "", "| replica | tok/s @ c=%d | weight |" % run["settings"]["concurrency"], "|---|---:|---:|"]
        for name, weight in run["weights"].items():
            lines.append("| %s | %s | %d |" % (name, _fmt(run["weight_basis"].get(name)), weight))
    sweeps = [t for t in run["targets"] if (t.get("measurement") or {}).get("sweep")]
    if sweeps:
        lines += ["", "## Concurrency sweep (tok/s)", "",
                  "| target | " + " | ".join("c=%d" % p["concurrency"]
                                             for p in sweeps[0]["measurement"]["sweep"]["points"]) + " | knee |",
                  "|---|" + "---:|" * (len(sweeps[0]["measurement"]["sweep"]["points"]) + 1)]
        for target in sweeps:
            sw = target["measurement"]["sweep"]
            lines.append("| %s | %s | c=%d |" % (target["name"], " | ".join(_fmt(p["throughput_tok_s"])
                                                                            for p in sw["points"]), sw["knee_at"]))
    if run.get("comparison"):
        lines += ["", "## A/B against other arms", ""]
        for block in run["comparison"]:
            lines += ["Arm `%s` against `%s` on `%s`:" % (block["candidate"], block["baseline"], block["target"]), "",
                      "| metric | %s | %s | change | verdict |" % (block["baseline"], block["candidate"]),
                      "|---|---:|---:|---:|---|"]
            for row in block["rows"]:
                lines.append("| %s | %s | %s | %+.1f %% | %s |" % (row["metric"], _fmt(row["baseline"], 3),
                                                                   _fmt(row["candidate"], 3), row["change"] * 100,
                                                                   row["verdict"]))
            lines.append("")
    lines += ["", "Files: `results.json` (every number), `plot.png`.", ""]
    return "\n".join(lines)


def render_plot(run, path):
    """PNG: the sweep per target (left) and decode/prefill per target (right). Needs matplotlib."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for target in run["targets"]:
        sw = (target.get("measurement") or {}).get("sweep")
        if sw:
            left.plot([p["concurrency"] for p in sw["points"]], [p["throughput_tok_s"] for p in sw["points"]],
                      marker="o", label=target["name"])
    left.set_xlabel("concurrent streams")
    left.set_ylabel("completion tok/s")
    left.set_title("Concurrency sweep")
    left.grid(alpha=0.3)
    if left.get_legend_handles_labels()[0]:
        left.legend()
    names = [t["name"] for t in run["targets"] if t.get("measurement")]
    decode = [metric(t["measurement"], ("single_stream", "decode_tok_s")) or 0 for t in run["targets"]
              if t.get("measurement")]
    conc = [metric(t["measurement"], ("concurrency", "throughput_tok_s")) or 0 for t in run["targets"]
            if t.get("measurement")]
    xs = range(len(names))
    right.bar([x - 0.2 for x in xs], decode, width=0.4, label="decode, 1 stream")
    right.bar([x + 0.2 for x in xs], conc, width=0.4, label="c=%d" % run["settings"]["concurrency"])
    right.set_xticks(list(xs))
    right.set_xticklabels(names, rotation=15)
    right.set_ylabel("tok/s")
    right.set_title("Decode and concurrency throughput")
    right.legend()
    fig.suptitle("pairserve bench %s (arm %s)" % (run["label"], run["arm"]))
    fig.tight_layout()
    tmp = path + ".tmp"
    fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    os.replace(tmp, path)


def write_atomic(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
