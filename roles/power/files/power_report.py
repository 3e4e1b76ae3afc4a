#!/usr/bin/env python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the power report (power.md, power.png) from the facts playbooks/power.yml collected.

    python roles/power/files/power_report.py --facts REPORT_DIR/power-idle.json [--facts REPORT_DIR/power-loaded.json] \
        --out-dir REPORT_DIR [--check]

Each facts file is {"phase": "idle"|"loaded", "hosts": {host: <the `power` result of pairserve.llm.gpu_power>}}.
Files are rewritten only when their content changes (a replayed run is reproducible, so a second run
changes nothing); the last line printed is JSON with `changed` for the play's changed_when.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile

HOURS_PER_YEAR = 8766  # as in plugins/module_utils/power.py


def _fmt(value, digits=1) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return str(value)


def load(paths: list) -> list:
    """[(phase, {host: power})], idle before loaded, hosts sorted."""
    phases = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        if not isinstance(data, dict) or data.get("phase") not in ("idle", "loaded") or not isinstance(
                data.get("hosts"), dict):
            raise SystemExit(f"power_report.py: {path} is not a facts file of playbooks/power.yml "
                             "({\"phase\": \"idle\"|\"loaded\", \"hosts\": {...}})")
        phases.append((data["phase"], dict(sorted(data["hosts"].items()))))
    phases.sort(key=lambda item: ("idle", "loaded").index(item[0]))
    return phases


def totals(hosts: dict) -> dict:
    """All GPUs of all hosts: summed mean draw and its annual energy."""
    means = [h["total"]["mean_w"] for h in hosts.values()]
    if not means or any(m is None for m in means):
        return {"gpus": sum(h["total"]["gpus"] for h in hosts.values()), "mean_w": None, "annual_kwh": None}
    mean = sum(means)
    return {"gpus": sum(h["total"]["gpus"] for h in hosts.values()), "mean_w": round(mean, 2),
            "annual_kwh": round(mean * HOURS_PER_YEAR / 1000.0, 1)}


def _phase_section(phase: str, hosts: dict) -> list:
    first = next(iter(hosts.values()))
    sources = ", ".join(f"{host} `{power['source']}`" for host, power in hosts.items())
    lines = [f"## {phase.capitalize()} window", "",
             f"{first['samples']} samples every {first['interval_s']} s per GPU. Sources: {sources}.", "",
             "| host | pair | GPUs | mean W | min W | max W | p95 W | limit W | kWh/year | energy J |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    pairs = []
    for host, power in hosts.items():
        for pair in power["pairs"]:
            pairs.append((host, pair))
            lines.append("| %s | %s | %s x%d | %s | %s | %s | %s | %s | %s | %s |" % (
                host, pair["index"], pair["name"], len(pair["uuids"]), _fmt(pair["mean_w"]), _fmt(pair["min_w"]),
                _fmt(pair["max_w"]), _fmt(pair["p95_w"]), _fmt(pair["power_limit_w"], 0), _fmt(pair["annual_kwh"]),
                _fmt(pair["energy_j"])))
    everything = totals(hosts)
    mwh = f" ({everything['annual_kwh'] / 1000:.2f} MWh)" if everything["annual_kwh"] is not None else ""
    lines.append(f"| **all hosts** | | {everything['gpus']} GPUs | **{_fmt(everything['mean_w'])}** | | | | | "
                 f"**{_fmt(everything['annual_kwh'])}**{mwh} | |")
    lines.append("")
    if phase == "idle" and len(pairs) >= 2:
        ranked = sorted(pairs, key=lambda item: item[1]["mean_w"] or 0)
        (low_host, low), (high_host, high) = ranked[0], ranked[-1]
        if low["mean_w"]:
            lines += [f"The highest idle pair, {high_host} pair {high['index']} ({high['name']}), draws "
                      f"{_fmt(high['mean_w'])} W: {high['mean_w'] / low['mean_w']:.1f}x the lowest, {low_host} pair "
                      f"{low['index']} ({low['name']}, {_fmt(low['mean_w'])} W). Left on all year it uses "
                      f"{_fmt(high['annual_kwh'])} kWh doing nothing.", ""]
    lines += ["Per GPU:", "", "| host | GPU | bus id | name | mean W | min W | max W | p95 W | limit W | "
              "energy-counter mean W | not supported |", "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for host, power in hosts.items():
        for gpu in power["gpus"]:
            lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                host, gpu["index"], gpu["bus_id"], gpu["name"], _fmt(gpu["mean_w"]), _fmt(gpu["min_w"]),
                _fmt(gpu["max_w"]), _fmt(gpu["p95_w"]), _fmt(gpu["power_limit_w"], 0),
                _fmt(gpu.get("energy_mean_w")), ", ".join(gpu.get("unsupported") or []) or "-"))
    lines.append("")
    lines += _bench_section(phase, hosts)
    return lines


def _bench_section(phase: str, hosts: dict) -> list:
    rows = [(host, pair) for host, power in hosts.items() for pair in power["pairs"] if pair.get("bench")]
    if not rows:
        return []
    lines = ["Bench figures per pair" + (" and throughput per watt (this window's mean draw):" if phase == "loaded"
                                         else " (throughput per watt needs a loaded window):"), "",
             "| host | pair | bench target | decode tok/s | tok/s @ c=N | ceiling tok/s | pair W | tok/s/W @ c=N | "
             "ceiling tok/s/W |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    sums = {"throughput_tok_s": 0.0, "ceiling_tok_s": 0.0, "mean_w": 0.0}
    complete = True
    for host, pair in rows:
        bench = pair["bench"]
        per_watt = bench.get("per_watt") or {}
        conc = f" (c={bench['concurrency']})" if bench.get("concurrency") else ""
        lines.append("| %s | %s | %s | %s | %s%s | %s | %s | %s | %s |" % (
            host, pair["index"], bench["target"], _fmt(bench["decode_tok_s"]), _fmt(bench["throughput_tok_s"]), conc,
            _fmt(bench["ceiling_tok_s"]), _fmt(pair["mean_w"]), _fmt(per_watt.get("throughput_tok_s"), 3),
            _fmt(per_watt.get("ceiling_tok_s"), 3)))
        for key in ("throughput_tok_s", "ceiling_tok_s"):
            if bench[key] is None:
                complete = False
            else:
                sums[key] += bench[key]
        sums["mean_w"] += pair["mean_w"] or 0
    if phase == "loaded" and complete and len(rows) > 1 and sums["mean_w"]:
        lines.append("| **all pairs** | | | | %s | %s | %s | %s | %s |" % (
            _fmt(sums["throughput_tok_s"]), _fmt(sums["ceiling_tok_s"]), _fmt(sums["mean_w"]),
            _fmt(sums["throughput_tok_s"] / sums["mean_w"], 3), _fmt(sums["ceiling_tok_s"] / sums["mean_w"], 3)))
    lines.append("")
    return lines


def render_markdown(phases: list) -> str:
    lines = ["# GPU power report", "",
             "GPU board power from NVML (pairserve.llm.gpu_power), not the host's wall power. kWh/year = mean W x "
             f"{HOURS_PER_YEAR} h / 1000. p95 is the nearest-rank 95th percentile of the samples.", ""]
    for phase, hosts in phases:
        lines += _phase_section(phase, hosts)
    lines.append("Plot: `power.png` (each pair's draw over the window, and mean draw per pair).")
    return "\n".join(lines) + "\n"


def render_plot(phases: list) -> bytes:
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels, bars = [], {}
    for phase, hosts in phases:
        for host, power in hosts.items():
            for pair in power["pairs"]:
                label = f"{host} pair {pair['index']}"
                if label not in labels:
                    labels.append(label)
                bars.setdefault(phase, {})[label] = pair["mean_w"] or 0
                samples = pair.get("samples_w") or []
                left.plot([i * power["interval_s"] for i in range(len(samples))], samples,
                          color=f"C{labels.index(label)}", linestyle="-" if phase == "loaded" else "--",
                          label=f"{label} ({phase})")
    left.set_xlabel("seconds into the window")
    left.set_ylabel("pair draw, W (sum of its GPUs)")
    left.set_title("Draw over the window")
    left.legend(fontsize="small")
    width = 0.8 / max(1, len(bars))
    for number, (phase, values) in enumerate(bars.items()):
        xs = [i + number * width for i in range(len(labels))]
        drawn = right.bar(xs, [values.get(label, 0) for label in labels], width=width, label=phase)
        right.bar_label(drawn, fmt="%.1f W", fontsize="small")
    right.set_xticks([i + width * (len(bars) - 1) / 2 for i in range(len(labels))], labels)
    right.set_ylabel("mean draw, W")
    right.set_title("Mean draw per pair")
    right.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    # No Software/date metadata: the same facts give the same bytes, so a rerun changes nothing.
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def _write_if_changed(path: str, content: bytes, check: bool) -> bool:
    try:
        with open(path, "rb") as handle:
            if handle.read() == content:
                return False
    except FileNotFoundError:
        pass
    if not check:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".power-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", action="append", required=True, help="facts file (repeat for idle and loaded)")
    parser.add_argument("--out-dir", required=True, help="where power.md and power.png go")
    parser.add_argument("--no-plot", action="store_true", help="only the Markdown table")
    parser.add_argument("--check", action="store_true", help="write nothing; say whether anything would change")
    args = parser.parse_args(argv)

    phases = load(args.facts)
    markdown = render_markdown(phases)
    report = os.path.join(args.out_dir, "power.md")
    changed = _write_if_changed(report, markdown.encode(), args.check)
    result = {"report": report, "phases": [phase for phase, dummy in phases]}
    if not args.no_plot:
        plot = os.path.join(args.out_dir, "power.png")
        changed = _write_if_changed(plot, render_plot(phases), args.check) or changed
        result["plot"] = plot
    result["changed"] = changed
    result["totals"] = {phase: totals(hosts) for phase, hosts in phases}
    print(markdown)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
