"""The filters through real ansible-playbook: rendering, the warnings dict, and a refusal failing its task.

One playbook run (~10 s) covers all three; the refusal is caught by block/rescue so its message comes back.
"""

from __future__ import annotations

from lab import pins
from support.ansible_runner import run_playbook

PLAY = """
- name: Render vLLM arguments
  hosts: localhost
  gather_facts: false
  vars:
    checkpoint: {hybrid: true, vision: true, mtp: true, native_context: 262144, quantization: nvfp4}
    pair: {memory_total_mib: 16376, compute_capability: "8.9"}
    profile: {name: text, max_num_seqs: 1}
    refused: {name: text, pipeline_parallel_size: 2}
    version: "%s"
  tasks:
    - name: Argv for GPUStack backend_parameters
      ansible.builtin.debug:
        msg: "{{ profile | pairserve.llm.vllm_args(version, checkpoint, pair) }}"
    - name: Argv with warnings
      ansible.builtin.debug:
        msg: "{{ profile | pairserve.llm.vllm_profile_check(version, checkpoint, pair) }}"
    - name: A refused profile
      block:
        - name: Pipeline parallelism
          ansible.builtin.debug:
            msg: "{{ refused | pairserve.llm.vllm_args(version, checkpoint, pair) }}"
      rescue:
        - name: Report the refusal
          ansible.builtin.debug:
            msg: "{{ ansible_failed_result.msg }}"
""" % pins.VLLM  # the lab's pinned vLLM (lab/inventory/group_vars/all/pins.yml)


def test_filters_render_warn_and_refuse_in_a_play(tmp_path):
    book = tmp_path / "play.yml"
    book.write_text(PLAY)
    res = run_playbook(book, inventory="localhost,", timeout=300)
    assert res.rc == 0, res.stdout + res.stderr
    argv = res.results[0]["msg"]
    assert argv[:3] == ["--tensor-parallel-size=2", "--max-model-len=98304", "--language-model-only"]
    assert "--mamba-cache-mode=align" in argv
    check = res.results[1]["msg"]
    assert check["argv"] == argv and check["version"] == pins.VLLM
    assert len(check["warnings"]) == 1 and "max_num_seqs 1" in check["warnings"][0]
    assert "pipeline_parallel_size 2 refused" in res.results[2]["msg"]  # the failed task itself
    assert "pairserve.llm.vllm_args: profile text: pipeline_parallel_size 2 refused" in res.results[3]["msg"]
    assert "248K-vocabulary embedding" in res.results[3]["msg"]
