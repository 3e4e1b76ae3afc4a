# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the bench's reports: llm_bench's run (markdown and a plot) and the bench play's report over the
baseline and every A/B arm.
"""

from __future__ import annotations

import io
import json

from ansible_collections.pairserve.llm.plugins.module_utils import _files
from ansible_collections.pairserve.llm.plugins.module_utils._bench_measure import metric


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
