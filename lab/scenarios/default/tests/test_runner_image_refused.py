"""A runner image that cannot be had stops site.yml in the preflight, before GPUStack is installed (where the pinned
image is pulled to be asked for its vLLM), so before any replica is registered or changed.

One run of the real site.yml against the converged lab, with node-a's runner image pinned to a digest the lab
registry does not have and node-b's runner image missing from the registry. Both nodes must fail at the runner
image, naming the image, and GPUStack's models and vLLM backend versions must be exactly as before.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from lab.api import REPO, call, items, lab_pins, read_keys

WRONG_DIGEST = "sha256:" + "0" * 64
# A well-formed pin of an image the registry never had (a malformed pin is preflight's, tested in its own suite).
OTHER_DIGEST = "sha256:" + "1" * 64
# Never pushed; its tag names the pinned vLLM, as a runner's does (else the validation play refuses it first).
MISSING = "127.0.0.1:5000/lab/not-pushed:" + lab_pins()["pairserve_vllm_version"]


@pytest.fixture(scope="module")
def keys():
    return read_keys()


def snapshot(key):
    models = {m["name"]: (m["updated_at"], m["backend_version"]) for m in items("/v2/models", key)}
    instances = sorted((i["name"], i["state"]) for i in items("/v2/model-instances", key))
    return models, instances


def test_wrong_digest_and_missing_image_fail_before_registration(keys):
    before = snapshot(keys["management"])
    status, backend = call("/v2/inference-backends/backend_name/vLLM", keys["management"])
    assert status == 200, backend
    image = lab_pins()["pairserve_runner_image"]
    # Per-host extra vars: Ansible templates them in each host's context.
    extra = ('{"pairserve_runner_image_digest": "{{ \'%s\' if inventory_hostname == \'node-a\' else \'%s\' }}",'
             ' "pairserve_runner_image": "{{ \'%s\' if inventory_hostname == \'node-a\' else \'%s\' }}"}'
             % (WRONG_DIGEST, OTHER_DIGEST, image, MISSING))
    run = subprocess.run([str(REPO / ".venv/bin/ansible-playbook"), "-i", "lab/inventory/hosts.yml", "site.yml",
                          "-e", extra], cwd=REPO, capture_output=True, text=True, check=False,
                         env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    out = re.sub(r"\s+", " ", run.stdout)
    assert run.returncode != 0, run.stdout[-3000:]
    assert re.search(r"fatal: \[node-a[^\]]*\].{0,600}%s@%s" % (re.escape(image), WRONG_DIGEST), out), run.stdout[-4000:]
    assert re.search(r"fatal: \[node-b[^\]]*\].{0,600}%s@%s" % (re.escape(MISSING), OTHER_DIGEST), out), \
        run.stdout[-4000:]
    # Stopped in the preflight's GPU checks: the play that installs GPUStack never started.
    assert "PLAY [GPUStack on every node]" not in run.stdout, run.stdout[-4000:]
    # Nothing was registered or changed, and neither node reached the replica role.
    assert "Register each pair's replica in GPUStack" not in run.stdout
    assert "Register the runner image as a version of GPUStack's vLLM backend" not in run.stdout
    assert snapshot(keys["management"]) == before
    status, after = call("/v2/inference-backends/backend_name/vLLM", keys["management"])
    assert status == 200 and after["version_configs"] == backend["version_configs"]
