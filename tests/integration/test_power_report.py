"""playbooks/power.yml on the recorded inventory: node_venv for real, gpu_pairs then gpu_power over the replayed
node A and node B (2 s windows), the report rendered on the controller; a second run changes nothing; a loaded
window with the seed's bench report adds throughput per watt to the same report.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.ansible_runner import REPO, run_playbook

# Builds a real venv (about 25 s of CPU): integration-tier cost, hence the marker.
pytestmark = pytest.mark.slow

PIN = "nvidia-ml-py==13.615.71"
INVENTORY = REPO / "inventory" / "recorded" / "hosts.yml"
PLAYBOOK = REPO / "playbooks" / "power.yml"
BENCH = REPO / "tests" / "fixtures" / "nvml" / "seed-bench-results-power.json"


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("power")
    local = sorted((REPO / ".cache" / "gpu-detection" / "wheels").glob("nvidia_ml_py-13.615.71-*.whl"))
    wheelhouse = local[0].parent if local else tmp / "wheelhouse"
    if not local:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                        str(wheelhouse), PIN], check=True, timeout=300)
    # One venv per host, as on real nodes: the two recorded hosts run on this one machine at once, and a shared
    # path had both create it at the same moment ("File exists").
    return {"pairserve_node_venv": str(tmp / "venv-{{ inventory_hostname }}"), "pairserve_node_wheelhouse": str(wheelhouse),
            "pairserve_node_python_packages": [PIN], "pairserve_power_window_seconds": 2,
            "pairserve_power_interval_seconds": 0.1, "pairserve_power_report_dir": str(tmp / "report")}


def _by_task(result):
    out = {}
    for record in result.results:
        out.setdefault(record["_task"], {})[record["_host"]] = record
    return out


def test_idle_report_then_loaded_with_throughput_per_watt(settings):
    report_dir = settings["pairserve_power_report_dir"]
    first = run_playbook(PLAYBOOK, inventory=INVENTORY, extra_vars=settings)
    assert first.rc == 0, first.stdout + first.stderr
    sampled = _by_task(first)["Sample the power draw of every GPU over the window"]
    assert sampled["node-a"]["power"]["pairs"][0]["mean_w"] == 21.6
    assert sampled["node-b"]["power"]["pairs"][0]["mean_w"] == 102.8
    facts = json.loads((REPO / report_dir / "power-idle.json").read_text())
    assert sorted(facts["hosts"]) == ["node-a", "node-b"] and "elapsed_s" not in facts["hosts"]["node-a"]
    markdown = (REPO / report_dir / "power.md").read_text()
    assert "| **all hosts** | | 4 GPUs | **124.4** | | | | | **1,090.5** (1.09 MWh) | |" in markdown
    assert "draws 102.8 W: 4.8x the lowest" in markdown
    png = (REPO / report_dir / "power.png").read_bytes()
    assert png.startswith(b"\x89PNG")

    second = run_playbook(PLAYBOOK, inventory=INVENTORY, extra_vars=settings)
    assert second.rc == 0, second.stdout + second.stderr
    changed = [(r["_host"], r["_task"]) for r in second.results if r.get("changed")]
    assert changed == [], changed
    assert (REPO / report_dir / "power.png").read_bytes() == png

    # A loaded window: each recorded host's loaded sibling, the seed's bench figures, the pair -> target map.
    loaded = {**settings, "pairserve_power_phase": "loaded",
              "pairserve_power_nvml_replay": "{{ pairserve_nvml_replay | regex_replace('[.]json$', '-power-loaded.json') }}",
              "pairserve_power_bench_report": str(BENCH),
              "pairserve_power_bench_targets": {"0": "qwen-{{ inventory_hostname }}"}}
    third = run_playbook(PLAYBOOK, inventory=INVENTORY, extra_vars=loaded)
    assert third.rc == 0, third.stdout + third.stderr
    bench = _by_task(third)["Sample the power draw of every GPU over the window"]["node-b"]["power"]["pairs"][0]["bench"]
    assert bench["per_watt"]["ceiling_tok_s"] == round(220 / 285, 4)
    markdown = (REPO / report_dir / "power.md").read_text()
    assert "## Idle window" in markdown and "## Loaded window" in markdown
    assert "| **all pairs** | | | | 421.0 | 495.0 | 645.0 | 0.653 | 0.767 |" in markdown
