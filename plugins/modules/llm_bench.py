#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Measure LLM serving endpoints with streamed requests and write a report with route weights."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llm_bench
short_description: Measure replicas and routes, derive route weights, and write a Markdown/JSON/PNG report
description:
  - Measures each target (a vLLM replica directly, or a GPUStack route) with streamed chat completions timed on the
    client - single-stream decode tok/s and TTFT, throughput at O(concurrency), a concurrency sweep (the ceiling),
    prefill tok/s at a long prompt, and TTFT of a repeated long context cold and warm (prefix caching).
  - Derives integer route weights, summing to 100, proportional to the throughput at O(concurrency) of the targets
    of kind C(replica) (the seed's 58/42 came from 244 and 177 tok/s). Applying them is the play's job
    (M(pairserve.llm.gpustack_route)), so this module never changes the route.
  - Writes C(report.md), C(results.json) and C(plot.png) into a new directory under O(report_dir) per run; with
    O(compare_with) it adds an A/B table saying which arm improved which metric.
  - Always C(changed) when not in check mode, because every run writes a new report. In check mode nothing is
    measured or written; each target gets one short request, so a check run proves the targets answer.
version_added: 0.1.0
author:
  - pairserve.llm maintainers (@pairserve)
extends_documentation_fragment:
  - pairserve.llm.attributes
attributes:
  check_mode:
    support: full
    details:
      - Sends one short request per target and writes nothing.
  diff_mode:
    support: full
    details:
      - The diff shows the report that was written; before is empty, as each run has its own directory.
options:
  targets:
    description: Endpoints to measure.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Label in the report; for replicas, the model name the weight belongs to in the route.
        type: str
        required: true
      base_url:
        description: API root without C(/v1).
        type: str
        required: true
      model:
        description: The C(model) sent (route name or served model name).
        type: str
        required: true
      api_key:
        description: Bearer token.
        type: str
      kind:
        description: C(replica) targets feed the weights; C(route) targets are measured for the report only.
        type: str
        choices: [replica, route]
        default: replica
      tokenize_url:
        description: vLLM C(/tokenize) URL for building long prompts; empty string to count via C(usage).
        type: str
  label:
    description: Name of the run in the report title and directory.
    type: str
    default: bench
  arm:
    description: The A/B arm this run measures (for example V(baseline), V(mtp), V(kv-fp8)).
    type: str
    default: baseline
  decode_tokens:
    description: Completion tokens per request.
    type: int
    default: 256
  ignore_eos:
    description: Send vLLM's C(ignore_eos) so every request produces exactly O(decode_tokens) tokens.
    type: bool
    default: true
  single_stream_requests:
    description: Sequential requests for the single-stream figures (the median is reported).
    type: int
    default: 3
  concurrency:
    description: Concurrent streams of the throughput run the weights come from (the seed's operating point is 8).
    type: int
    default: 8
  rounds:
    description: Requests each stream sends back to back in the concurrency runs.
    type: int
    default: 2
  sweep:
    description: Concurrency levels of the sweep; an empty list skips it.
    type: list
    elements: int
    default: [1, 2, 4, 8, 16]
  prefill_tokens:
    description: Prompt length of the prefill and prefix-cache measurements (16384 on the real cards); 0 skips both.
    type: int
    default: 16384
  prefix_cache:
    description: Measure TTFT of a repeated long context cold and warm.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for one response.
    type: float
    default: 900
  validate_certs:
    description:
      - Verify the TLS certificates of the targets, against O(ca_path) when it is set, else against the system trust
        store. For a private CA give it in O(ca_path).
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA that signed the server's certificate; the system trust store when not set. Ignored for
        V(http://) URLs and with O(validate_certs=false), but a path given must be a readable PEM file either way.
      - With it only the CAs of that file are trusted, as with O(ansible.builtin.uri#module:ca_path).
      - The same file verifies every target.
    type: path
  report_dir:
    description: Directory under which each run writes C(<timestamp>-<label>-<arm>/).
    type: path
    required: true
  compare_with:
    description: C(results.json) files of earlier runs (other arms) to compare this run with, target by target.
    type: list
    elements: path
    default: []
  plot:
    description: Write C(plot.png) (needs matplotlib on the host running the module).
    type: bool
    default: true
seealso:
  - module: pairserve.llm.llm_verify
  - module: pairserve.llm.gpustack_route
"""

EXAMPLES = r"""
- name: Measure both replicas and the route
  pairserve.llm.llm_bench:
    targets:
      - {name: qwen-node-a, base_url: "http://10.0.0.11:40001", model: qwen-node-a}
      - {name: qwen-node-b, base_url: "http://10.0.0.12:40001", model: qwen-node-b}
      - {name: qwen, kind: route, base_url: "http://gpustack.example", model: qwen, api_key: "{{ key }}",
         tokenize_url: "http://10.0.0.11:40001/tokenize"}
    report_dir: "{{ playbook_dir }}/../bench-reports"
  register: bench

- name: Show the weights
  ansible.builtin.debug:
    var: bench.weights
"""

RETURN = r"""
weights:
  description: Route weights per replica target, proportional to throughput at O(concurrency), summing to 100.
  returned: when at least one replica target was measured
  type: dict
  sample: {qwen-node-a: 58, qwen-node-b: 42}
weight_basis:
  description: The throughput at O(concurrency) each weight was derived from, tok/s.
  returned: when at least one replica target was measured
  type: dict
  sample: {qwen-node-a: 244.0, qwen-node-b: 177.0}
results:
  description: Every measurement per target (see C(results.json)).
  returned: success
  type: list
  elements: dict
comparison:
  description: Per compared arm and target, each metric with baseline, candidate, change and verdict.
  returned: when O(compare_with) is given
  type: list
  elements: dict
report_path:
  description: The Markdown report.
  returned: success, not in check mode
  type: str
  sample: /srv/bench/20261130T120000-bench-baseline/report.md
json_path:
  description: The JSON results.
  returned: success, not in check mode
  type: str
plot_path:
  description: The PNG plot.
  returned: success, not in check mode, when O(plot) is true
  type: str
run_dir:
  description: The directory of this run.
  returned: success, not in check mode
  type: str
"""

import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.pairserve.llm.plugins.module_utils import _files
from ansible_collections.pairserve.llm.plugins.module_utils._bench_measure import BenchError, compare, measure, weights
from ansible_collections.pairserve.llm.plugins.module_utils._bench_report import render_markdown, render_plot
from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Client, ProbeError
from ansible_collections.pairserve.llm.plugins.module_utils._openai_failures import classify
from ansible_collections.pairserve.llm.plugins.module_utils.urls_session import CaPathError

try:
    import matplotlib  # noqa: F401  pylint: disable=unused-import
    HAS_MATPLOTLIB = True
except ImportError:
    HAS_MATPLOTLIB = False


def _load_comparisons(module, paths):
    runs = []
    for path in paths:
        try:
            with open(path, "r", encoding="utf-8") as handle:
                runs.append(json.load(handle))
        except (OSError, ValueError) as exc:
            module.fail_json(msg="compare_with: %s is not a results.json of an earlier bench run (%s); give the "
                                 "results.json path a previous llm_bench run returned as json_path." % (path, exc))
    return runs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            targets=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                base_url=dict(type="str", required=True),
                model=dict(type="str", required=True),
                api_key=dict(type="str", no_log=True),
                kind=dict(type="str", choices=["replica", "route"], default="replica"),
                tokenize_url=dict(type="str", no_log=False),
            )),
            label=dict(type="str", default="bench"),
            arm=dict(type="str", default="baseline"),
            decode_tokens=dict(type="int", default=256, no_log=False),
            ignore_eos=dict(type="bool", default=True),
            single_stream_requests=dict(type="int", default=3),
            concurrency=dict(type="int", default=8),
            rounds=dict(type="int", default=2),
            sweep=dict(type="list", elements="int", default=[1, 2, 4, 8, 16]),
            prefill_tokens=dict(type="int", default=16384, no_log=False),
            prefix_cache=dict(type="bool", default=True),
            timeout=dict(type="float", default=900),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            report_dir=dict(type="path", required=True),
            compare_with=dict(type="list", elements="path", default=[]),
            plot=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    names = [t["name"] for t in p["targets"]]
    if len(set(names)) != len(names):
        module.fail_json(msg="targets: names must be unique (got %s); each name labels one endpoint." % names)
    for key in ("decode_tokens", "single_stream_requests", "concurrency", "rounds"):
        if p[key] < 1:
            module.fail_json(msg="%s must be at least 1 (got %d)." % (key, p[key]))
    if p["decode_tokens"] < 2:
        module.fail_json(msg="decode_tokens must be at least 2 to time decoding (got %d)." % p["decode_tokens"])
    if any(level < 1 for level in p["sweep"]):
        module.fail_json(msg="sweep: every concurrency level must be >= 1 (got %s)." % p["sweep"])
    if p["prefill_tokens"] < 0:
        module.fail_json(msg="prefill_tokens must be >= 0 (0 skips prefill); got %d." % p["prefill_tokens"])
    if p["plot"] and not HAS_MATPLOTLIB:
        module.fail_json(msg=missing_required_lib("matplotlib", reason="to draw plot.png (or set plot: false)"))
    if not re.match(r"^[\w.-]+\Z", p["label"] + p["arm"]):
        module.fail_json(msg="label and arm become a directory name: use letters, digits, '.', '_' and '-' only "
                             "(got %r, %r)." % (p["label"], p["arm"]))
    earlier = _load_comparisons(module, p["compare_with"])

    try:
        clients = {t["name"]: Client(t["base_url"], t["api_key"], p["timeout"], p["validate_certs"],
                                     t["tokenize_url"], ca_path=p["ca_path"]) for t in p["targets"]}
    except CaPathError as err:
        module.fail_json(msg=str(err))

    if module.check_mode:
        reach = []
        for target in p["targets"]:
            resp = clients[target["name"]].chat({"model": target["model"], "max_tokens": 1, "temperature": 0,
                                                 "messages": [{"role": "user", "content": "Say hello."}]})
            if not resp.ok:
                cls, why = classify(resp, target["model"])
                module.fail_json(msg="%s does not answer, nothing to measure (%s): %s" % (target["name"], cls, why))
            reach.append({"name": target["name"], "status": resp.status, "elapsed_s": round(resp.elapsed, 3)})
        module.exit_json(changed=True, results=reach,
                         msg="check mode: the targets answer; a run would measure them and write a report under %s"
                             % p["report_dir"])

    settings = {k: p[k] for k in ("decode_tokens", "ignore_eos", "single_stream_requests", "concurrency", "rounds",
                                  "sweep", "prefill_tokens", "prefix_cache")}
    run = {"label": p["label"], "arm": p["arm"], "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "settings": settings, "targets": []}
    for target in p["targets"]:
        entry = {"name": target["name"], "kind": target["kind"], "model": target["model"],
                 "base_url": target["base_url"]}
        try:
            entry["measurement"] = measure(clients[target["name"]], target["model"], settings)
        except (BenchError, ProbeError) as exc:
            entry["error"] = str(exc)
        run["targets"].append(entry)

    basis = {t["name"]: t["measurement"]["concurrency"]["throughput_tok_s"] for t in run["targets"]
             if t["kind"] == "replica" and t.get("measurement")}
    if basis:
        run["weight_basis"] = basis
        run["weights"] = weights(basis)

    comparison = []
    for other in earlier:
        theirs = {t["name"]: t.get("measurement") for t in other.get("targets", [])}
        for target in run["targets"]:
            if target.get("measurement") and theirs.get(target["name"]):
                comparison.append({"baseline": other.get("arm"), "candidate": p["arm"], "target": target["name"],
                                   "rows": compare(theirs[target["name"]], target["measurement"])})
    if comparison:
        run["comparison"] = comparison

    stamp = time.strftime("%Y%m%dT%H%M%S")
    run_dir = os.path.join(p["report_dir"], "%s-%s-%s" % (stamp, p["label"], p["arm"]))
    suffix = 1
    while os.path.exists(run_dir):
        suffix += 1
        run_dir = os.path.join(p["report_dir"], "%s-%s-%s-%d" % (stamp, p["label"], p["arm"], suffix))
    os.makedirs(run_dir)
    report = render_markdown(run)
    json_path = os.path.join(run_dir, "results.json")
    _files.atomic_write(json_path, json.dumps(run, indent=1, sort_keys=True) + "\n")
    report_path = os.path.join(run_dir, "report.md")
    _files.atomic_write(report_path, report)
    result = dict(changed=True, results=run["targets"], run_dir=run_dir, report_path=report_path,
                  json_path=json_path, report=report,
                  diff={"before": "", "after": report, "before_header": report_path, "after_header": report_path})
    if p["plot"]:
        plot_path = os.path.join(run_dir, "plot.png")
        render_plot(run, plot_path)
        result["plot_path"] = plot_path
    if basis:
        result["weights"] = run["weights"]
        result["weight_basis"] = basis
    if comparison:
        result["comparison"] = comparison
    failed = [t for t in run["targets"] if t.get("error")]
    if failed:
        module.fail_json(msg="measuring %s failed: %s (the report with what was measured is in %s)" % (
            ", ".join(t["name"] for t in failed), "; ".join(t["error"] for t in failed), run_dir), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
