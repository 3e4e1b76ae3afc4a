"""The replica role refuses a profile name that is neither built-in nor defined, naming the host and the variable,
before it renders anything (the day-2 plays reach it without the validation play); a defined profile renders.

One ansible-playbook run over two local hosts, with the check-only switch the rebuild play uses (nothing is
registered either way).
"""

from __future__ import annotations

import json
import re
import sys

from lab import pins
from support.ansible_runner import run_playbook

PAIR = {"index": 0, "uuids": ["GPU-a", "GPU-b"], "gpustack_gpu_indexes": [0, 1], "memory_total_mib": 16303,
        "compute_capability": "12.0"}
CHECKPOINT = {"path": "/srv/ckpt", "architecture": "Qwen3_5ForConditionalGeneration", "hybrid": True,
              "vision": True, "mtp": True, "native_context": 262144, "quantization": "nvfp4"}

PLAY = """
- name: Check the replicas only
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Render and check the replica
      ansible.builtin.include_role:
        name: pairserve.llm.replica
      vars:
        pairserve_replica_check_only: true
"""


def test_unknown_profile_is_refused_with_host_and_variable_and_a_defined_one_renders(tmp_path):
    inventory = {"all": {
        "children": {
            "gpustack_server": {"hosts": {"gs": {"pairserve_gpustack_management_key": "unused"}}},
            "gpu_nodes": {"hosts": {
                "node-a": {"pairserve_replica_profile": "agents",
                           "pairserve_profiles": {"agents": {"base": "text", "max_num_seqs": 4}}},
                # A typo of multimodal: before, it was rendered as multimodal under that name.
                "node-b": {"pairserve_replica_profile": "multimodel"},
            }},
        },
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "pairserve_vllm_version": pins.VLLM, "pairserve_gpu": {"pairs": [PAIR]},
                 "pairserve_checkpoint": CHECKPOINT, "pairserve_replica_model_path": "/srv/ckpt"},
    }}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    res = run_playbook(tmp_path / "play.yml", inventory=tmp_path / "hosts.yml", timeout=300)
    assert res.rc != 0, res.stdout[-3000:]
    by_host = {}
    for record in res.results:
        by_host.setdefault(record["_host"], []).append(record)
    refused = [r for r in by_host["node-b"] if r["_status"] == "failed"]
    assert len(refused) == 1, by_host["node-b"]
    msg = re.sub(r"\s+", " ", refused[0]["msg"])
    assert refused[0]["_task"].endswith("Check the profile name is built-in or defined"), refused[0]["_task"]
    assert msg.startswith('node-b: pairserve_replica_profile "multimodel" is neither a built-in profile'), msg
    assert "known: multimodal, text" in msg
    # node-b rendered nothing; node-a's defined profile rendered on its own settings over its base.
    assert not any("pairserve_replica_specs" in r.get("ansible_facts", {}) for r in by_host["node-b"])
    specs = [r["ansible_facts"]["pairserve_replica_specs"] for r in by_host["node-a"]
             if "pairserve_replica_specs" in r.get("ansible_facts", {})]
    assert len(specs) == 1 and specs[0][0]["profile"] == "agents", by_host["node-a"]
    assert "--max-num-seqs=4" in specs[0][0]["argv"] and "--max-model-len=98304" in specs[0][0]["argv"]
    assert not [r for r in by_host["node-a"] if r["_status"] == "failed"]
