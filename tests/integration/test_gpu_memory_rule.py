"""The seed's memory rule before anything is installed: control_plane.yml renders each host's serving profile for
the cards gpu_pairs found (role replica, entry point check), right after the GPU inventory and before GPUStack is
installed. gpu_pairs' fact comes from its own code over recorded hosts (the real nvidia-ml-py over the replay).

On 16 GiB cards (node-a's 2x RTX 5080, 16,303 MiB), gpu_memory_utilization 0.95 is refused, naming the setting and
the acknowledgement that accepts it (the seed's pair booted at 0.95 with ~10 MiB free and died on a 34 MiB
activation); with accept_gpu_memory_above_092 it passes with a warning; the same 0.95 on an H200's 141 GiB is no
16 GiB question and passes; 0.90 on 16 GiB passes with the seed's 20 MiB warning. The check changes nothing.
"""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import nvml, nvml_replay
from support.ansible_runner import REPO, run_playbook
from lab.api import lab_pins

NVML = REPO / "tests" / "fixtures" / "nvml"
SIXTEEN_GIB = NVML / "node-a-2x5080.json"
H200 = NVML / "h200-recording-2026-12-01.json"
RENDER = "Render this host's serving profile for each pair's cards, refusing what the seed proved broken"
REFUSE = "Refuse this host's serving profile, naming the host and the variables"


def gpu_fact(recording, group_size=2):
    return nvml.gather({nvml_replay.ENV_VAR: str(recording)}, group_size=group_size, expected_pairs=1)


def check(tmp_path, fact, **profile):
    book = tmp_path / "check.yml"
    book.write_text("""---
- name: The serving profile against the cards, as control_plane.yml checks it
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Check this host's serving profile against its cards
      ansible.builtin.include_role:
        name: pairserve.llm.replica
        tasks_from: check
""")
    extra = {"pairserve_gpu": fact, "pairserve_replica_profile": "multimodal",
             "pairserve_profiles": {"multimodal": profile}, "pairserve_vllm_version": lab_pins()["pairserve_vllm_version"]}
    res = run_playbook(book, extra_vars=extra, timeout=300)
    assert not [r for r in res.results if r.get("changed")], "the check changed something"
    return res


def warnings_of(res):
    done = [r for r in res.results if r["_task"] == RENDER and r["_status"] == "ok"]
    assert done, res.stdout[-3000:]
    return [w for pair in done[-1]["ansible_facts"]["pairserve_replica_precheck"] for w in pair["warnings"]]


def test_095_on_16_gib_cards_is_refused_naming_the_acknowledgement(tmp_path):
    res = check(tmp_path, gpu_fact(SIXTEEN_GIB), gpu_memory_utilization=0.95)
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert [r["_task"] for r in failed] == [RENDER, REFUSE], failed
    msg = " ".join(failed[-1]["msg"].split())
    # the refusal names the host and the variables that chose the profile, then the rule
    assert msg.startswith("localhost: pairserve_replica_profile (multimodal) / pairserve_profiles: profile multimodal: "
                          "gpu_memory_utilization 0.95 refused on a pair of 16303 MiB cards"), msg
    assert "34 MiB activation" in msg and "accept_gpu_memory_above_092: true" in msg, msg


def test_095_with_the_acknowledgement_passes_with_a_warning(tmp_path):
    res = check(tmp_path, gpu_fact(SIXTEEN_GIB), gpu_memory_utilization=0.95, accept_gpu_memory_above_092=True)
    assert res.rc == 0, res.stdout[-3000:]
    assert any("above 0.92" in w and "34 MiB activation" in w for w in warnings_of(res)), warnings_of(res)


@pytest.mark.parametrize("util, warned", [(0.92, False), (0.90, True)])
def test_092_passes_quietly_and_below_it_warns_with_the_seeds_20_mib(tmp_path, util, warned):
    res = check(tmp_path, gpu_fact(SIXTEEN_GIB), gpu_memory_utilization=util)
    assert res.rc == 0, res.stdout[-3000:]
    assert any("20 MiB" in w for w in warnings_of(res)) is warned, warnings_of(res)


def test_095_on_an_h200_is_not_a_16_gib_question(tmp_path):
    res = check(tmp_path, gpu_fact(H200, group_size=1), gpu_memory_utilization=0.95, tensor_parallel_size=1)
    assert res.rc == 0, res.stdout[-3000:]
