"""A/B arms of the bench play: the report over the baseline and every arm (measured, failed with which check and
why, not run) - in Python and through the bench role's report entry point in a real ansible-playbook run - and the
play refusing a bad arm before it measures or drains. The arms' validation and profile in Python:
tests/unit/plugins/module_utils/test__bench_arms.py."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.pairserve.llm.plugins.module_utils._bench_measure import compare
from ansible_collections.pairserve.llm.plugins.module_utils._bench_report import render_summary_markdown, summarize
from support.ansible_runner import run_playbook


def _m(decode, conc):
    return {"single_stream": {"decode_tok_s": decode, "ttft_s": 0.2}, "concurrency": {"throughput_tok_s": conc}}


BASELINE = {"label": "lab", "arm": "baseline", "started": "2026-11-30T10:00:00+0000",
            "settings": {"decode_tokens": 32, "ignore_eos": True, "concurrency": 4, "prefill_tokens": 0},
            "targets": [{"name": "qwen-node-a", "kind": "replica", "measurement": _m(30.0, 100.0)},
                        {"name": "qwen-node-b", "kind": "replica", "measurement": _m(30.0, 100.0)}],
            "weights": {"qwen-node-a": 50, "qwen-node-b": 50},
            "weight_basis": {"qwen-node-a": 100.0, "qwen-node-b": 100.0}}
ARMS = [{"name": "seqs-2", "kind": "node", "node": "node-b", "replica": {"max_num_seqs": 2}},
        {"name": "fp8", "kind": "node", "node": "node-b", "replica": {"kv_cache_dtype": "fp8"}},
        {"name": "later", "kind": "node", "node": "node-a", "replica": {"max_num_seqs": 4}}]


def _outcomes():
    rows = compare(_m(30.0, 100.0), _m(31.0, 60.0))
    return [{"name": "seqs-2", "status": "measured", "argv": ["--max-num-seqs=2"], "measured_targets": ["qwen-node-b"],
             "comparison": [{"baseline": "baseline", "candidate": "seqs-2", "target": "qwen-node-b", "rows": rows}],
             "restored": {"registration": "put back and rolled out again (qwen-node-b)", "route weights": "restored"}},
            {"name": "fp8", "status": "failed", "failed_check": "Wait until arm fp8 on node-b runs",
             "why": "qwen-node-b-x error - ValueError: fp8 KV cache is not supported on CPU",
             "restored": {"registration": "put back and rolled out again (qwen-node-b)", "route weights": "restored"}}]


def test_summary_keeps_every_arm_and_says_what_improved():
    summary = summarize(BASELINE, ARMS, _outcomes(), route="qwen", weights_applied=False)
    by_name = {a["name"]: a for a in summary["arms"]}
    assert [a["name"] for a in summary["arms"]] == ["seqs-2", "fp8", "later"], "in the arms' order, none dropped"
    assert by_name["seqs-2"]["regressed"] == ["qwen-node-b: throughput at concurrency N tok/s (-40.0 %)"]
    assert by_name["seqs-2"]["unchanged"] == ["qwen-node-b: single-stream decode tok/s (+3.3 %)",
                                              "qwen-node-b: single-stream TTFT s (+0.0 %)"]
    assert by_name["seqs-2"]["not_compared"] == []
    assert by_name["fp8"]["status"] == "failed" and by_name["fp8"]["improved"] == []
    assert by_name["later"]["status"] == "not_run" and "stopped before this arm" in by_name["later"]["why"]
    assert summary["failed"] == ["fp8", "later"]


def test_summary_markdown_names_the_failed_check_and_the_weights_state():
    text = render_summary_markdown(summarize(BASELINE, ARMS, _outcomes(), route="qwen",
                                             weights_applied=True, weights_note=""))
    assert "applied to route `qwen` by the bench play:" in text
    assert "| seqs-2 | node node-b via GPUStack | measured | - | qwen-node-b: throughput at concurrency N tok/s (-40.0 %) |" in text
    assert "**failed** at Wait until arm fp8 on node-b runs: qwen-node-b-x error - ValueError: fp8 KV cache" in text
    assert "| throughput at concurrency N tok/s | 100.000 | 60.000 | -40.0 % | regressed |" in text
    assert "vLLM arguments: `--max-num-seqs=2`" in text
    assert "Afterwards: registration put back and rolled out again (qwen-node-b); route weights restored." in text
    assert "**2 of 3 arm(s) failed: fp8, later.**" in text
    assert text.count("Files:") == 1


def test_an_arm_measured_on_a_target_the_baseline_lacks_says_so():
    outcome = [{"name": "seqs-2", "status": "measured", "measured_targets": ["qwen-node-c"], "comparison": []}]
    summary = summarize(BASELINE, ARMS[:1], outcome)
    assert summary["arms"][0]["not_compared"] == ["qwen-node-c"]
    assert "Measured but not compared (the baseline has no target of that name): qwen-node-c." in \
        render_summary_markdown(summary)


PLAY = """
- name: The bench report entry point
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Check arms
      ansible.builtin.set_fact:
        checked: "{{ arms | pairserve.llm.bench_arms_check(['node-a', 'node-b']) }}"
    - name: Write the report
      block:
        - name: Run the report
          ansible.builtin.include_role:
            name: pairserve.llm.bench
            tasks_from: report
          vars:
            pairserve_bench_checked_arms: "{{ checked }}"
      rescue:
        - name: Say why the play would fail
          ansible.builtin.debug:
            msg: "{{ ansible_failed_result.msg }}"
"""


def _report_play(tmp_path, fail_on_failure):
    run_dir = tmp_path / "20261130T100000-lab-baseline"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(BASELINE))
    book = tmp_path / "play.yml"
    book.write_text(PLAY)
    extra = {"arms": [{k: v for k, v in a.items() if k != "kind"} for a in ARMS[:2]],
             "pairserve_bench_endpoint_outcomes": _outcomes(),
             "_pairserve_bench_baseline": {"json_path": str(run_dir / "results.json"), "run_dir": str(run_dir)},
             "pairserve_bench_report_dir": str(tmp_path), "pairserve_bench_fail_on_arm_failure": fail_on_failure}
    return run_playbook(book, extra_vars=extra, timeout=300)


def test_report_entry_point_writes_the_report_and_fails_on_a_failed_arm(tmp_path):
    res = _report_play(tmp_path, True)
    assert res.rc == 0, res.stdout[-3000:]
    report = tmp_path / "20261130T100000-lab-report"
    data = json.loads((report / "results.json").read_text())
    assert [a["status"] for a in data["arms"]] == ["measured", "failed"]
    assert data["weights_applied"] is False, "pairserve_bench_apply_weights was false"
    text = (report / "report.md").read_text()
    assert "not applied (set pairserve_bench_apply_weights: true)" in text and "## A/B arms" in text
    why = res.result.get("msg", "")
    assert "1 of 2 A/B arm(s) failed: fp8 at \"Wait until arm fp8 on node-b runs\"" in why, res.stdout[-3000:]
    assert "Every node was put back" in why


def test_report_entry_point_carries_on_when_told(tmp_path):
    res = _report_play(tmp_path, False)
    assert res.rc == 0, res.stdout[-3000:]
    assert any("Arm fp8: failed" in str(r.get("msg", "")) for r in res.results), res.stdout[-3000:]
    assert not any("A/B arm(s) failed" in str(r.get("msg", "")) for r in res.results), "no failure when told to carry on"
    assert (tmp_path / "20261130T100000-lab-report" / "report.md").exists()


def test_bench_play_refuses_a_bad_arm_before_measuring_or_draining(tmp_path):
    """playbooks/bench.yml itself: a wrong arm stops the first play (nothing measured, no report) and, through
    any_errors_fatal, every later play (nothing rendered on the node, nothing drained)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpustack_server:\n      hosts:\n        localhost:\n"
                         "    gpu_nodes:\n      hosts:\n        localhost:\n"
                         "  vars:\n    ansible_connection: local\n")
    res = run_playbook(Path(__file__).resolve().parents[4] / "playbooks" / "bench.yml", inventory=inventory,
                       extra_vars={"pairserve_bench_targets": [{"name": "x", "base_url": "http://127.0.0.1:9",
                                                                "model": "m"}],
                                   "pairserve_bench_arms": [{"name": "seqs-2", "node": "node-z",
                                                             "replica": {"max_num_seq": 2}}],
                                   "pairserve_bench_report_dir": str(tmp_path / "reports")}, timeout=300)
    assert res.rc != 0
    out = res.stdout
    assert "2 problem(s) in pairserve_bench_arms" in out, out[-3000:]
    assert "node 'node-z' is not a host of group gpu_nodes" in out and "replica key(s) max_num_seq" in out
    assert "Measure the baseline" not in out and "Render every A/B arm on its node" not in out
    assert not (tmp_path / "reports").exists()
