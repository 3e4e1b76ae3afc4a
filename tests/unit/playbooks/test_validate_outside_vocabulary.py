"""The validation play (site.yml's first play) over an inventory whose values break the pinned software's own
vocabulary and whose hosts reach one machine twice: every problem in one run, each naming its host and variable,
nothing contacted, and the admin password in no line of the output."""

from __future__ import annotations

import os
import re
import subprocess

import yaml

from support.ansible_runner import REPO
from support import inventory_views

WEAK_PASSWORD = "weak-admin-pw1"  # no upper-case letter, no special character GPUStack counts


def _inventory(tmp_path):
    common = {k: v for k, v in inventory_views.GOOD_VIEW.items() if not k.endswith("_set")}
    common.update({
        "ansible_connection": "ansible.builtin.ssh", "ansible_host": "192.0.2.50",
        "pairserve_gpustack_admin_password": WEAK_PASSWORD, "pairserve_gpustack_db_password": "db-Pass_word1",
        "pairserve_replica_profile": "agents",
        "pairserve_profiles": {"agents": {"base": "text", "kv_cache_dtype": "fp9"}},
    })
    hosts = {
        "node-a": {"ansible_port": 2201},
        "node-b": {"ansible_port": 2201,  # node-a's machine again
                   "pairserve_gpustack_worker_env": {"GPUSTACK_RUNTIME_DOCKER_RESOURCE_INJECTION_POLICY": "cdi"}},
    }
    inventory = {"all": {"vars": common, "children": {
        "gpustack_server": {"hosts": {"node-a": None}},
        "gpu_nodes": {"hosts": hosts}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return tmp_path / "hosts.yml"


def test_one_run_reports_each_value_outside_the_pinned_vocabulary(tmp_path):
    run = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(_inventory(tmp_path)),
                          str(REPO / "site.yml")], cwd=REPO, capture_output=True, text=True, check=False,
                         env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1"),
                         timeout=300)
    out = run.stdout
    assert run.returncode != 0, out[-3000:]
    lines = [line.strip() for line in out.splitlines() if re.match(r"^\s*node-[abc](, node-[abc])*: [a-z_]+: ", line)]
    by_variable = dict((line.split(": ")[1], line) for line in lines)
    assert sorted(by_variable) == ["ansible_host", "pairserve_gpustack_admin_password",
                                   "pairserve_gpustack_worker_env", "pairserve_profiles"], lines
    assert by_variable["ansible_host"].startswith("node-b: ansible_host: reaches the same machine as node-a: "
                                                  "192.0.2.50 port 2201")
    assert by_variable["pairserve_gpustack_admin_password"].startswith("node-a: pairserve_gpustack_admin_password: "
                                                                       "breaks GPUStack 2.2.3's password rule")
    assert "uppercase" in by_variable["pairserve_gpustack_admin_password"]
    assert by_variable["pairserve_gpustack_worker_env"].startswith(
        "node-b: pairserve_gpustack_worker_env: GPUSTACK_RUNTIME_DOCKER_RESOURCE_INJECTION_POLICY 'cdi' is not one of")
    assert by_variable["pairserve_profiles"].startswith("node-a, node-b: pairserve_profiles: profile agents: "
                                                        "kv_cache_dtype 'fp9' is not a value vLLM")
    assert "fp8_e4m3" in by_variable["pairserve_profiles"]
    assert WEAK_PASSWORD not in out and WEAK_PASSWORD not in run.stderr
    # stopped in the validation play: no host contacted
    assert "UNREACHABLE" not in out and "Preflight every node" not in out, out[-3000:]
