"""The bench role keeps its measured weights, or says they are temporary: its own task files (weights_plan.yml,
weights_keep.yml) and its report entry point in real ansible-playbook runs over an inventory directory, the file
they write read back by the route role's rule (route_wanted) to the measured weights, the report's text without a
file, and playbooks/bench.yml refusing a bad pairserve_bench_weights_file before it measures anything."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ansible_collections.pairserve.llm.plugins.module_utils import routes
from support.ansible_runner import REPO, run_playbook

# node-a's two pairs measured alike: the route role splits a host's weight evenly (31/30).
MEASURED = {"qwen-node-a": 31, "qwen-node-a-p1": 30, "qwen-node-b": 39}
SERVING = """---
# Serving settings (a comment the bench keeps).
pairserve_serving_mode: pooled
pairserve_route_weights:   # measured by the bench
  node-a: 58
  node-b: 42
pairserve_route_name: qwen
"""
BASELINE = {"label": "lab", "arm": "baseline", "started": "2026-12-05T10:00:00+0000",
            "settings": {"decode_tokens": 32, "ignore_eos": True, "concurrency": 4, "prefill_tokens": 0},
            "targets": [{"name": n, "kind": "replica", "measurement": {}} for n in MEASURED],
            "weights": MEASURED, "weight_basis": dict((n, float(w)) for n, w in MEASURED.items())}

KEEP_PLAY = """
- name: The bench's weights kept in the inventory
  hosts: gpustack_server
  gather_facts: false
  tasks:
    - name: Resolve the weights file as the preflight does
      ansible.builtin.set_fact:
        pairserve_bench_weights_target: "{{ pairserve_bench_weights_file | default('') | pairserve.llm.bench_weights_file(inventory_dir) }}"
        pairserve_bench_route: qwen
        pairserve_bench_model_name: qwen
    - name: Plan
      ansible.builtin.include_role:
        name: pairserve.llm.bench
        tasks_from: weights_plan
    - name: Keep
      ansible.builtin.include_role:
        name: pairserve.llm.bench
        tasks_from: weights_keep
"""


def _inventory(tmp_path: Path, weights_file: str = "") -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "group_vars" / "all" / "serving.yml").write_text(SERVING)
    server_vars = {"ansible_connection": "local"}
    if weights_file:
        server_vars["pairserve_bench_weights_file"] = weights_file
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "gpustack_server": {"hosts": {"node-a": server_vars}},
        "gpu_nodes": {"hosts": {"node-a": None, "node-b": {"ansible_connection": "local"}}}}}}))
    return inv


def _keep(tmp_path: Path, weights_file: str, check: bool = False):
    inv = _inventory(tmp_path, weights_file)
    book = tmp_path / "keep.yml"
    book.write_text(KEEP_PLAY)
    return inv, run_playbook(book, inventory=inv / "hosts.yml", check=check, diff=True, timeout=300,
                             extra_vars={"_pairserve_bench_baseline": {"weights": MEASURED}, "pairserve_bench_apply_weights": True,
                                         "_pairserve_bench_applied": {"changed": True}})


def test_the_weights_file_gets_the_per_host_sums_and_the_route_keeps_the_measured_weights(tmp_path):
    inv, res = _keep(tmp_path, "group_vars/all/serving.yml")
    assert res.rc == 0, res.stdout[-3000:]
    written = res.by_task["Write the measured weights into the inventory"]
    assert written["changed"] is True and written["action"] == "replaced"
    text = (inv / "group_vars" / "all" / "serving.yml").read_text()
    assert text == SERVING.replace("pairserve_route_weights:   # measured by the bench\n  node-a: 58\n  node-b: 42\n",
                                   "pairserve_route_weights:\n  node-a: 61\n  node-b: 39\n")
    weights = yaml.safe_load(text)["pairserve_route_weights"]
    # What the next site.yml's route role computes from the file: the measured weight of every replica.
    replicas = {"node-a": [{"name": "qwen-node-a", "profile": "text"}, {"name": "qwen-node-a-p1", "profile": "text"}],
                "node-b": [{"name": "qwen-node-b", "profile": "text"}]}
    wanted = routes.wanted_routes("pooled", replicas, weights, "qwen")[0]["targets"]
    assert sorted((t["model"], t["weight"]) for t in wanted) == sorted(MEASURED.items())
    said = res.by_task["Say whether the weights outlive the next site.yml"]["msg"]
    assert said[0].startswith("Kept: pairserve_route_weights written to %s" % (inv / "group_vars" / "all" / "serving.yml"))
    assert len(said) == 1, said


def test_a_second_run_with_the_same_weights_changes_nothing(tmp_path):
    inv, first = _keep(tmp_path, "group_vars/all/route_weights.yml")
    assert first.rc == 0 and first.by_task["Write the measured weights into the inventory"]["action"] == "created"
    book = tmp_path / "keep.yml"
    again = run_playbook(book, inventory=inv / "hosts.yml", timeout=300,
                         extra_vars={"_pairserve_bench_baseline": {"weights": MEASURED}, "pairserve_bench_apply_weights": False})
    assert again.rc == 0, again.stdout[-3000:]
    assert again.by_task["Write the measured weights into the inventory"]["changed"] is False
    said = " ".join(again.by_task["Say whether the weights outlive the next site.yml"]["msg"])
    assert "already holds these weights" in said
    # serving.yml still sets 58/42 and this run's inventory read it: the report says another file sets it.
    assert "another source sets it" in said


def test_check_mode_writes_nothing(tmp_path):
    inv, res = _keep(tmp_path, "group_vars/all/serving.yml", check=True)
    assert res.rc == 0, res.stdout[-3000:]
    assert (inv / "group_vars" / "all" / "serving.yml").read_text() == SERVING


def test_weights_that_are_not_per_host_are_refused_before_anything_is_written(tmp_path):
    inv = _inventory(tmp_path, "group_vars/all/serving.yml")
    book = tmp_path / "keep.yml"
    book.write_text(KEEP_PLAY)
    res = run_playbook(book, inventory=inv / "hosts.yml", timeout=300,
                       extra_vars={"_pairserve_bench_baseline": {"weights": {"fast": 60, "slow": 40}}})
    assert res.rc != 0
    assert "node-a: pairserve_bench_weights_file: the measured weights" in res.stdout
    assert "replica(s) fast, slow are not named qwen-<host>[-p<N>]" in res.stdout
    assert (inv / "group_vars" / "all" / "serving.yml").read_text() == SERVING


def test_without_a_file_the_play_and_the_report_say_the_weights_are_temporary(tmp_path):
    inv, res = _keep(tmp_path, "")
    assert res.rc == 0, res.stdout[-3000:]
    said = res.by_task["Say whether the weights outlive the next site.yml"]["msg"]
    assert said[0] == ("TEMPORARY: these weights were applied to route qwen, but the next site.yml sets it back from "
                       "the inventory's pairserve_route_weights = {node-a: 58, node-b: 42} (a host not named gets 50).")
    assert "set pairserve_bench_weights_file" in said[1]
    assert said[2:] == ["pairserve_route_weights:", "  node-a: 61", "  node-b: 39"]
    assert (inv / "group_vars" / "all" / "serving.yml").read_text() == SERVING

    # The report entry point renders the same, with the YAML to paste.
    run_dir = tmp_path / "20261205T100000-lab-baseline"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(BASELINE))
    book = tmp_path / "report.yml"
    book.write_text(KEEP_PLAY + """
    - name: Report
      ansible.builtin.include_role:
        name: pairserve.llm.bench
        tasks_from: report
      vars:
        pairserve_bench_checked_arms: []
""")
    res = run_playbook(book, inventory=inv / "hosts.yml", timeout=300, extra_vars={
        "_pairserve_bench_baseline": {"weights": MEASURED, "json_path": str(run_dir / "results.json"),
                                      "run_dir": str(run_dir)},
        "pairserve_bench_apply_weights": True, "_pairserve_bench_applied": {"changed": True},
        "pairserve_bench_report_dir": str(tmp_path)})
    assert res.rc == 0, res.stdout[-3000:]
    report = tmp_path / "20261205T100000-lab-report"
    text = (report / "report.md").read_text()
    assert "## After this run: temporary weights" in text
    assert "TEMPORARY: these weights were applied to route qwen, but the next site.yml sets it back" in text
    assert "```yaml\npairserve_route_weights:\n  node-a: 61\n  node-b: 39\n```" in text
    data = json.loads((report / "results.json").read_text())
    assert data["weights_kept"]["temporary"] is True and data["weights_kept"]["host_weights"] == {"node-a": 61, "node-b": 39}
    assert "TEMPORARY" in res.by_task["Show which arm improved which metric"]["msg"]


def test_the_bench_play_refuses_a_bad_weights_file_before_measuring(tmp_path):
    inv = _inventory(tmp_path, "group_vars/all")
    res = run_playbook(REPO / "playbooks" / "bench.yml", inventory=inv / "hosts.yml", timeout=300,
                       extra_vars={"pairserve_bench_targets": [{"name": "x", "base_url": "http://127.0.0.1:9",
                                                                "model": "m"}],
                                   "pairserve_bench_report_dir": str(tmp_path / "reports")})
    assert res.rc != 0
    out = " ".join(res.stdout.split())
    assert "node-a: pairserve_bench_weights_file: group_vars/all is not a .yml or .yaml file" in out, out[-3000:]
    assert "Nothing was measured or changed" in out
    assert "Measure the baseline" not in res.stdout and not (tmp_path / "reports").exists()
