"""Preflight's GPU container check cannot pass vacuously: the runner image, run with each pair's GPUs, must see
exactly them from inside.

One run of `site.yml --tags runner_image` on the converged lab, with node-a's CDI spec still *naming* both of its
GPUs (so the spec check passes) but no longer handing its second GPU to a container (the device's edits no longer
carry it, as a stale or hand-edited spec can do). node-a must fail at the GPU container check naming the GPU the
container did not receive; node-b, whose spec is intact, must pass the same check with both of its UUIDs; nothing
is changed on either node. The spec is restored after the run, whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from lab.api import REPO

SPEC = Path("/var/run/cdi/pairserve-lab-node-a.json")
CHECK = "Check that each pair's container received exactly that pair's GPUs"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".test.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def test_a_gpu_the_container_does_not_receive_fails_naming_it_and_a_whole_pair_passes():
    original = SPEC.read_text(encoding="utf-8")
    spec = json.loads(original)
    kept, dropped = spec["devices"][0]["name"], spec["devices"][1]["name"]
    assert kept.startswith("GPU-") and dropped.startswith("GPU-"), spec
    # still a valid spec (CDI refuses a device without edits): the device resolves, its GPU never reaches the container
    spec["devices"][1]["containerEdits"] = {"env": ["PAIRSERVE_LAB_STALE_DEVICE=1"]}
    _write(SPEC, json.dumps(spec, indent=1) + "\n")
    try:
        run = subprocess.run([str(REPO / ".venv/bin/ansible-playbook"), "-i", "inventory/lab/hosts.yml", "site.yml",
                              "--tags", "runner_image"], cwd=REPO, capture_output=True, text=True, check=False,
                             timeout=1200, env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    finally:
        _write(SPEC, original)
    out = re.sub(r"\s+", " ", run.stdout)
    assert run.returncode != 0, run.stdout[-4000:]
    failed = re.search(r"TASK \[pairserve\.llm\.runner_image : %s\].*?(?=TASK \[|PLAY RECAP)" % re.escape(CHECK), out)
    assert failed, run.stdout[-4000:]
    block = failed.group(0)
    # node-a: the container saw its first GPU only, and the message names the one it did not receive
    saw = r"failed: \[node-a\].{0,8000}?the container saw %s; missing %s" % (re.escape(kept), re.escape(dropped))
    assert re.search(saw, block), block
    assert "nvidia.com/gpu=<UUID>" in block and "nvidia-ctk cdi generate" in block, block
    # node-b: its pair's container saw both of its GPUs
    assert re.search(r"ok: \[node-b\] => \(item=pair 0\)", block), block
    assert "failed: [node-b]" not in block, block
    # the spec check before it passed on node-a: the spec names both GPUs, only the container shows the fault
    assert not re.search(r"fatal: \[node-a\].{0,300}no CDI spec", out), out[-4000:]
    recap = dict(re.findall(r"^(node-[ab])\s*:.*?changed=(\d+)", run.stdout, re.M))
    assert recap == {"node-a": "0", "node-b": "0"}, recap
