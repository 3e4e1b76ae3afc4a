"""The GPU container check cannot pass vacuously: the runner image, started as GPUStack starts each pair's replica
(privileged, every GPU of the node handed over, CUDA_VISIBLE_DEVICES = the pair's GPUStack indexes, PCI bus order),
must see exactly the pair through CUDA's enumeration (the lab's stand-in for it, lab/stand_ins/cuda-uuids).

One run of `site.yml --tags runner_image` on the converged lab, with node-a's CDI spec still *naming* both of its
GPUs (so the spec check passes) but handing another card than its second GPU to a container under that name (the
device's edits carry node-b's card at the same PCI address, as a stale spec after a card swap does). node-a must
fail at the GPU container check naming the GPU CUDA did not see and the card it saw instead, with the node's PCI
order; node-b, whose spec is intact, must pass the same check with both of its UUIDs; nothing is changed on either
node. The spec is restored after the run, whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from lab.api import REPO

SPEC = Path("/var/run/cdi/pairserve-lab-node-a.json")
CHECK = "Check that CUDA in each pair's container sees exactly that pair's GPUs"
OTHER_SPEC = Path("/var/run/cdi/pairserve-lab-node-b.json")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".test.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def test_a_gpu_the_container_does_not_receive_fails_naming_it_and_a_whole_pair_passes():
    original = SPEC.read_text(encoding="utf-8")
    spec = json.loads(original)
    kept, dropped = spec["devices"][0]["name"], spec["devices"][1]["name"]
    foreign = json.loads(OTHER_SPEC.read_text(encoding="utf-8"))["devices"][0]["name"]
    assert kept.startswith("GPU-") and dropped.startswith("GPU-") and foreign not in (kept, dropped), spec
    # the name still resolves, but the device handed over under it is node-b's card at the same PCI address
    spec["devices"][1]["containerEdits"] = {"env": [e.replace(dropped, foreign)
                                                    for e in spec["devices"][1]["containerEdits"]["env"]]}
    assert any(foreign in e for e in spec["devices"][1]["containerEdits"]["env"]), spec
    _write(SPEC, json.dumps(spec, indent=1) + "\n")
    try:
        run = subprocess.run([str(REPO / ".venv/bin/ansible-playbook"), "-i", "lab/inventory/hosts.yml", "site.yml",
                              "--tags", "runner_image"], cwd=REPO, capture_output=True, text=True, check=False,
                             timeout=1200, env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    finally:
        _write(SPEC, original)
    out = re.sub(r"\s+", " ", run.stdout)
    assert run.returncode != 0, run.stdout[-4000:]
    failed = re.search(r"TASK \[pairserve\.llm\.runner_image : %s\].*?(?=TASK \[|PLAY RECAP)" % re.escape(CHECK), out)
    assert failed, run.stdout[-4000:]
    block = failed.group(0)
    # node-a: CUDA saw its first GPU and the foreign card; the message names the missing one, the foreign one and the
    # way GPUStack starts the replica
    saw = r"failed: \[node-a\].{0,8000}?CUDA saw %s, %s; missing %s; not of the pair %s" % (
        re.escape(kept), re.escape(foreign), re.escape(dropped), re.escape(foreign))
    assert re.search(saw, block), block
    assert "privileged" in block and "CUDA_VISIBLE_DEVICES=0,1" in block and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in block
    assert "PCI order" in block and "nvidia.com/gpu=<UUID>" in block and "nvidia-ctk cdi generate" in block, block
    # node-b: its pair's container saw both of its GPUs
    assert re.search(r"ok: \[node-b\] => \(item=pair 0\)", block), block
    assert "failed: [node-b]" not in block, block
    # the spec check before it passed on node-a: the spec names both GPUs, only the container shows the fault
    assert not re.search(r"fatal: \[node-a\].{0,300}no CDI spec", out), out[-4000:]
    recap = dict(re.findall(r"^(node-[ab])\s*:.*?changed=(\d+)", run.stdout, re.M))
    assert recap == {"node-a": "0", "node-b": "0"}, recap
