"""The replica names the route is built from: the `names` entry point (what `--tags route` runs in serve.yml) gives
the same names, pairs and profile as the replica role's own rendering, one per GPU pair (<base>-<host>, -p<N>).

Real ansible-playbook on the controller (connection local); the GPU and checkpoint facts are given, nothing is
registered (pairserve_replica_check_only).
"""

from __future__ import annotations

from lab import pins
from support.ansible_runner import run_playbook

INVENTORY = """
all:
  vars:
    ansible_connection: local
  children:
    gpustack_server:
      hosts:
        node-a:
          pairserve_gpustack_management_key: not-used-in-check-only
    gpu_nodes:
      hosts:
        node-a:
"""

PLAY = """
- name: Name the replicas both ways
  hosts: gpu_nodes
  gather_facts: false
  vars:
    pairserve_vllm_version: "PINNED_VLLM"
    pairserve_replica_profile: text
    pairserve_checkpoint: {path: /srv/model, hybrid: false, vision: false, mtp: false, native_context: 262144,
                           quantization: null}
    pairserve_gpu:
      pairs:
        - {index: 0, memory_total_mib: 16376, compute_capability: "8.9", gpustack_gpu_indexes: [0, 1], uuids: [GPU-a, GPU-b]}
        - {index: 1, memory_total_mib: 16376, compute_capability: "8.9", gpustack_gpu_indexes: [2, 3], uuids: [GPU-c, GPU-d]}
  tasks:
    - name: Name them without rendering
      ansible.builtin.include_role:
        name: pairserve.llm.replica
        tasks_from: names

    - name: Show the names
      ansible.builtin.debug:
        var: pairserve_replicas

    - name: Forget them
      ansible.builtin.set_fact:
        pairserve_replicas: null

    - name: Render and check the replicas
      ansible.builtin.include_role:
        name: pairserve.llm.replica
      vars:
        pairserve_replica_check_only: true

    - name: Show the rendered specs and the names the role set
      ansible.builtin.debug:
        msg:
          specs: "{{ pairserve_replica_specs | map(attribute='name') | list }}"
          replicas: "{{ pairserve_replicas }}"
""".replace("PINNED_VLLM", pins.VLLM)  # the lab's pinned vLLM (lab/inventory/group_vars/all/pins.yml)


def test_names_alone_match_the_rendered_replicas(tmp_path):
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    (tmp_path / "play.yml").write_text(PLAY)
    res = run_playbook(tmp_path / "play.yml", inventory=tmp_path / "hosts.yml", timeout=300)
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-2000:]
    named = next(r for r in res.results if "pairserve_replicas" in r)["pairserve_replicas"]
    assert named == [{"name": "qwen-node-a", "pair": 0, "profile": "text"},
                     {"name": "qwen-node-a-p1", "pair": 1, "profile": "text"}]
    rendered = res.results[-1]["msg"]
    assert rendered["specs"] == ["qwen-node-a", "qwen-node-a-p1"]
    assert rendered["replicas"] == named
