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

import io
import json
import re
import statistics
import threading
import time
import uuid

from ansible_collections.pairserve.llm.plugins.module_utils import _files
from ansible_collections.pairserve.llm.plugins.module_utils import openai_probe as probe
from ansible_collections.pairserve.llm.plugins.module_utils import routes
from ansible_collections.pairserve.llm.plugins.module_utils import vllm_args

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


# --- report -------------------------------------------------------------------------------------

def _fmt(value, digits=1):
    if value is None:
        return "-"
    if isinstance(value, float):
        return ("%%.%df" % digits) % value
    return str(value)


def _weights_state(run):
    """How the report states the weights: llm_bench only derives them; the bench play's report knows whether the
    play applied them (``weights_applied`` True/False, ``route``), a bare llm_bench run does not (absent)."""
    applied = run.get("weights_applied")
    if applied is None:
        return "; derived only (llm_bench never changes the route; the bench play's report says whether they were applied)"
    if applied:
        return "; applied to route `%s` by the bench play%s" % (run.get("route"), run.get("weights_note") or "")
    return "; not applied (set pairserve_bench_apply_weights: true)"


def _comparison_table(block, candidate):
    """Markdown rows of one comparison block (baseline against ``candidate``), metric by metric."""
    rows = ["| metric | %s | %s | change | verdict |" % (block["baseline"], candidate), "|---|---:|---:|---:|---|"]
    for row in block["rows"]:
        rows.append("| %s | %s | %s | %+.1f %% | %s |" % (row["metric"], _fmt(row["baseline"], 3),
                                                          _fmt(row["candidate"], 3), row["change"] * 100,
                                                          row["verdict"]))
    return rows


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
                  % (run["settings"]["concurrency"], _weights_state(run)),
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
            lines += ["Arm `%s` against `%s` on `%s`:" % (block["candidate"], block["baseline"], block["target"]), ""]
            lines += _comparison_table(block, block["candidate"])
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
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=90)
    plt.close(fig)
    _files.atomic_write(path, png.getvalue())


# --- A/B arms: validation, and the bench play's report over the baseline and every arm -----------

ARM_NAME = re.compile(r"^[\w.-]+$")
ARM_KEYS = ("name", "targets", "node", "replica")
# What an arm booted through GPUStack may change on its node's replica: the profile keys of vllm_args (merged
# over the node's own profile, so the arm differs from the baseline only where it says) and the replica's
# environment. name/base choose which profile is merged over, ab_arm is set by the play: not an arm's business.
ARM_REPLICA_KEYS = tuple(k for k in vllm_args.PROFILE_KEYS if k not in ("name", "base", "ab_arm")) + ("env",)
ARM_TARGET_KEYS = ("name", "base_url", "model")


class ArmError(ValueError):
    """pairserve_bench_arms is malformed; the message lists every problem and what to write instead."""


def check_arms(arms, nodes=(), var="pairserve_bench_arms"):
    """Validate the A/B arms before anything is measured or changed; return them normalised.

    Two forms: ``{name, targets: [...]}`` (endpoints someone else started) and ``{name, node, replica: {...}}``
    (the play boots the arm on ``node`` through GPUStack with ``replica`` merged over that node's profile).
    Each returned arm carries ``kind`` (``endpoint`` or ``node``). Raises ArmError naming every problem."""
    problems = []
    if arms is None:
        arms = []
    if not isinstance(arms, list):
        raise ArmError("%s must be a list of arms, got %s" % (var, type(arms).__name__))
    nodes = list(nodes or [])
    seen = set()
    out = []
    for pos, arm in enumerate(arms):
        where = "%s[%d]" % (var, pos)
        if not isinstance(arm, dict):
            problems.append("%s: an arm is a dict ({name, node, replica} or {name, targets}), got %r" % (where, arm))
            continue
        name = arm.get("name")
        if isinstance(name, str) and name:
            where = "%s[%d] (%s)" % (var, pos, name)
        unknown = sorted(set(arm) - set(ARM_KEYS))
        if unknown:
            problems.append("%s: unknown key(s) %s; an arm has %s" % (where, ", ".join(unknown), ", ".join(ARM_KEYS)))
        if not isinstance(name, str) or not ARM_NAME.match(name):
            problems.append("%s: name must be letters, digits, '.', '_' or '-' (it names the report directory), "
                            "got %r" % (where, name))
        elif name == "baseline":
            problems.append("%s: 'baseline' is the run every arm is compared with; give the arm another name" % where)
        elif name in seen:
            problems.append("%s: the name is used by an earlier arm; arm names must be unique" % where)
        else:
            seen.add(name)
        has_targets, has_node = "targets" in arm, ("node" in arm or "replica" in arm)
        if has_targets == has_node:
            problems.append("%s: give either targets (endpoints already serving the arm) or node and replica (the "
                            "play boots the arm on that node through GPUStack), not %s"
                            % (where, "both" if has_targets else "neither"))
            continue
        if has_targets:
            targets = arm["targets"]
            if not isinstance(targets, list) or not targets:
                problems.append("%s: targets must be a non-empty list of {name, base_url, model}" % where)
                continue
            for tpos, target in enumerate(targets):
                missing = [k for k in ARM_TARGET_KEYS if not isinstance(target, dict) or not target.get(k)]
                if missing:
                    problems.append("%s: targets[%d] lacks %s" % (where, tpos, ", ".join(missing)))
            out.append(dict(arm, kind="endpoint"))
            continue
        node, replica = arm.get("node"), arm.get("replica")
        if not isinstance(node, str) or node not in nodes:
            problems.append("%s: node %r is not a host of group gpu_nodes (%s); name the inventory host whose "
                            "replica boots this arm" % (where, node, ", ".join(nodes) or "the group is empty"))
        if not isinstance(replica, dict) or not replica:
            problems.append("%s: replica must be a non-empty dict of overrides of the node's replica (e.g. "
                            "{max_num_seqs: 4}, {kv_cache_dtype: fp8}, {speculative: {method: mtp, "
                            "num_speculative_tokens: 2}}); an arm that changes nothing measures the baseline again"
                            % where)
            continue
        bad = sorted(set(replica) - set(ARM_REPLICA_KEYS))
        if bad:
            problems.append("%s: replica key(s) %s cannot be overridden by an arm; the keys are the profile keys of "
                            "docs/vllm-arguments.md and env: %s" % (where, ", ".join(bad), ", ".join(ARM_REPLICA_KEYS)))
        env = replica.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                                and not isinstance(v, bool) for k, v in env.items()):
            problems.append("%s: replica.env must map variable names to strings or numbers, got %r" % (where, env))
        extra = replica.get("extra_args", [])
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            problems.append("%s: replica.extra_args must be a list of strings such as '--max-num-seqs=2', got %r"
                            % (where, extra))
        out.append(dict(arm, kind="node"))
    if problems:
        raise ArmError("%d problem(s) in %s, nothing was measured or changed:\n- %s"
                       % (len(problems), var, "\n- ".join(problems)))
    return out


def arm_profile(profile_name, profiles, replica):
    """The profile an arm's replica renders: the node's profile (``profile_name`` with its entry of
    ``profiles``, pairserve_profiles) with the arm's overrides merged over it, ``ab_arm`` set (MTP is allowed
    only in an arm). ``env`` is not a profile key; the play merges it over the node's replica env."""
    base = dict((profiles or {}).get(profile_name) or {})
    base.update({k: v for k, v in (replica or {}).items() if k != "env"})
    base["ab_arm"] = True
    return base


def _verdicts(comparison):
    """{improved: [...], regressed: [...], unchanged: [...]} of 'target: metric (+x.x %)' strings."""
    out = {"improved": [], "regressed": [], "unchanged": []}
    for block in comparison or []:
        for row in block.get("rows", []):
            line = "%s: %s (%+.1f %%)" % (block["target"], row["metric"], row["change"] * 100)
            out.setdefault(row["verdict"], []).append(line)
    return out


def summarize(baseline, arms, outcomes, route=None, weights_applied=None, weights_note="", weights_kept=None):
    """The bench play's report data: the baseline run (its results.json), the weights and whether the play
    applied them, and every arm of ``arms`` in order with its outcome. An arm with no outcome did not run
    (the play stopped first) and counts as failed: nothing is dropped silently. ``weights_kept``: whether the
    weights outlive the next site.yml (bench_weights.kept: lines, the YAML to paste, temporary)."""
    by_name = {}
    for outcome in outcomes or []:
        if isinstance(outcome, dict) and outcome.get("name"):
            by_name[outcome["name"]] = outcome
    rows = []
    for arm in arms or []:
        outcome = dict(by_name.get(arm["name"]) or {"status": "not_run", "failed_check": "-",
                                                    "why": "no outcome was recorded: the play stopped before this arm"})
        entry = {"name": arm["name"], "kind": arm.get("kind") or ("node" if "node" in arm else "endpoint"),
                 "node": arm.get("node"), "replica": arm.get("replica"),
                 "targets": [t.get("name") for t in arm.get("targets") or []]}
        entry.update({k: v for k, v in outcome.items() if k != "name"})
        entry.update(_verdicts(entry.get("comparison")))
        if entry["status"] == "measured":
            compared = set(b["target"] for b in entry.get("comparison") or [])
            entry["not_compared"] = sorted(set(entry.get("measured_targets") or []) - compared)
        rows.append(entry)
    summary = {"label": baseline.get("label"), "started": baseline.get("started"), "settings": baseline.get("settings"),
               "baseline": baseline, "route": route, "weights": baseline.get("weights"),
               "weight_basis": baseline.get("weight_basis"), "weights_applied": weights_applied,
               "weights_note": weights_note or "", "weights_kept": weights_kept or None, "arms": rows,
               "failed": [r["name"] for r in rows if r["status"] != "measured"]}
    return summary


def _md_cell(text):
    return " ".join(str(text).split()).replace("|", "\\|")


def render_summary_markdown(summary):
    """The bench play's report: the baseline as llm_bench renders it (with the weights' real state), then one
    table of the arms (status, what improved, what regressed) and a section per arm."""
    baseline = dict(summary["baseline"], route=summary.get("route"), weights_applied=summary.get("weights_applied"),
                    weights_note=summary.get("weights_note"))
    baseline.pop("comparison", None)
    text = render_markdown(baseline).rstrip("\n").split("\n")
    # render_markdown ends with the files line of one run; this report has its own.
    while text and (not text[-1].strip() or text[-1].startswith("Files:")):
        text.pop()
    lines = text
    kept = summary.get("weights_kept")
    if kept and summary.get("weights"):
        lines += ["", "## After this run: %s" % ("temporary weights" if kept.get("temporary") else "weights kept"),
                  ""] + [" ".join(kept.get("lines") or [])]
        if kept.get("yaml"):
            lines += ["", "```yaml", kept["yaml"].rstrip("\n"), "```"]
    arms = summary.get("arms") or []
    if arms:
        lines += ["", "## A/B arms", "",
                  "Each arm had to answer an ordinary request before it was measured (a boot is not a stability "
                  "result); changes within 5 % are `unchanged`.", "",
                  "| arm | boots on | status | improved | regressed |", "|---|---|---|---|---|"]
        for arm in arms:
            status = arm["status"] if arm["status"] == "measured" else "**%s** at %s: %s" % (
                arm["status"], arm.get("failed_check") or "-", arm.get("why") or "-")
            lines.append("| %s | %s | %s | %s | %s |" % (
                arm["name"], ("node %s via GPUStack" % arm["node"]) if arm["kind"] == "node"
                else "endpoints %s" % ", ".join(arm.get("targets") or []), _md_cell(status),
                _md_cell("; ".join(arm.get("improved") or []) or "-"),
                _md_cell("; ".join(arm.get("regressed") or []) or "-")))
        for arm in arms:
            lines += ["", "### Arm `%s`" % arm["name"], ""]
            if arm["kind"] == "node":
                lines.append("Booted on `%s` through GPUStack with overrides `%s`." % (
                    arm["node"], json.dumps(arm.get("replica"), sort_keys=True)))
                if arm.get("argv"):
                    lines += ["", "vLLM arguments: `%s`" % " ".join(arm["argv"])]
                restored = arm.get("restored") or {}
                if restored:
                    lines += ["", "Afterwards: %s." % "; ".join("%s %s" % (k, v) for k, v in sorted(restored.items()))]
            if arm["status"] != "measured":
                lines += ["", "**%s** at `%s`: %s" % (arm["status"].replace("_", " "), arm.get("failed_check") or "-",
                                                      arm.get("why") or "-")]
            for block in arm.get("comparison") or []:
                lines += ["", "Against `%s` on `%s`:" % (block["baseline"], block["target"]), ""]
                lines += _comparison_table(block, arm["name"])
            if arm.get("not_compared"):
                lines += ["", "Measured but not compared (the baseline has no target of that name): %s."
                          % ", ".join(arm["not_compared"])]
            if arm.get("report_path"):
                lines += ["", "The arm's own run: `%s`." % arm["report_path"]]
    failed = summary.get("failed") or []
    lines += ["", "**%d of %d arm(s) failed: %s.**" % (len(failed), len(arms), ", ".join(failed)) if failed
              else "All %d arm(s) measured." % len(arms) if arms else "No A/B arm.",
              "", "Files: `results.json` (this report's data: the baseline run and every arm).", ""]
    return "\n".join(lines)
