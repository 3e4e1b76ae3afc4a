"""An inventory with many mistakes, run for real against the converged lab: site.yml lists every mistake with its
host and variable, and no node changes.

The lab's own inventory is layered with the mistakes of tests/fixtures/inventories/many-mistakes (pins, secrets,
profiles, env, route weights, ports, names; and a third GPU node whose worker name is node-a's). node-a and node-b
stay reachable over SSH as in every lab run, so a check that let the run go on would change them: the test compares
a snapshot of both nodes (what the collection manages on disk, the packages, the running services) and of GPUStack
(models, instances, routes, backend versions, workers, API keys) before and after.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from lab.api import REPO, call, items, read_keys
from support.many_mistakes import EXPECTED, MISTAKES, reported

NODES = {"node-a": "pairserve-lab-node-a", "node-b": "pairserve-lab-node-b"}
# What the collection writes on a node (config, secrets, venvs, units, the checkpoint cache); bytecode that a
# running service may write on import is left out.
MANAGED = ("/etc/gpustack", "/etc/gpustack-worker", "/etc/pairserve", "/opt/gpustack", "/opt/pairserve",
           "/etc/systemd/system", "/var/lib/pairserve", "/var/lib/pairserve-lab")


@pytest.fixture(scope="module")
def keys():
    return read_keys()


def overlay(tmp_path):
    """The lab's hosts plus node-c (a closed port), with the fixture's group_vars and host_vars."""
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all").symlink_to(MISTAKES / "group_vars" / "all")
    for host in ("node-a", "node-b", "node-c"):
        (tmp_path / "host_vars" / f"{host}.yml").symlink_to(MISTAKES / "host_vars" / f"{host}.yml")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpustack_server:\n      hosts:\n        node-a:\n"
        "    gpu_nodes:\n      hosts:\n        node-a:\n        node-b:\n"
        "        node-c:\n          ansible_host: 127.0.0.1\n          ansible_port: 9\n")
    return tmp_path / "hosts.yml"


def node_snapshot(container):
    script = ("find %s -xdev \\( -name __pycache__ -o -name '*.pyc' \\) -prune -o -printf '%%p %%s %%m %%T@\\n' "
              "2>/dev/null | sort; dpkg-query -W -f='${Package} ${Version}\\n' | sort; "
              "systemctl list-units --type=service --state=running --no-legend --plain | awk '{print $1}' | sort"
              % " ".join(MANAGED))
    out = subprocess.run(["podman", "exec", container, "sh", "-c", script], check=True, capture_output=True,
                         text=True).stdout
    assert "/opt/gpustack" in out and "gpustack-worker.service" in out, out[:2000]  # it sees what the lab installed
    return out


def gpustack_snapshot(key):
    # Fields a run of the collection would change; not the heartbeat times of workers or the last use of keys.
    fields = {"/v2/models": ("id", "name", "updated_at", "backend_version", "replicas"),
              "/v2/model-instances": ("id", "name", "state"), "/v2/model-routes": ("id", "name", "updated_at"),
              "/v2/model-route-targets": ("id", "route_id", "model_id", "weight"), "/v2/workers": ("id", "name"),
              "/v2/api-keys": ("id", "name")}
    snap = {path: sorted(tuple(x.get(f) for f in names) for x in items(path, key)) for path, names in fields.items()}
    status, backend = call("/v2/inference-backends/backend_name/vLLM", key)
    assert status == 200, backend
    snap["vLLM versions"] = backend["version_configs"]
    return snap


def test_many_mistakes_are_all_listed_and_no_node_changes(keys, tmp_path):
    nodes_before = {node: node_snapshot(container) for node, container in NODES.items()}
    gpustack_before = gpustack_snapshot(keys["management"])
    run = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "lab/inventory/hosts.yml",
                          "-i", str(overlay(tmp_path)), "site.yml"], cwd=REPO, capture_output=True, text=True,
                         check=False, timeout=600,
                         env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    assert run.returncode != 0, run.stdout[-3000:]
    found = reported(run.stdout)
    # The lab inventory sets the admin password, so that one mistake of the fixture does not apply here.
    expected = EXPECTED - {("node-a", "pairserve_gpustack_admin_password")}
    assert expected <= found, "not reported: %s\n%s" % (sorted(expected - found), run.stdout[-4000:])
    assert len(expected) >= 15
    # Stopped in the validation play: no later play started, no host was contacted, nothing changed.
    assert "UNREACHABLE" not in run.stdout and "Preflight every node" not in run.stdout, run.stdout[-3000:]
    assert not re.search(r"changed=[1-9]", run.stdout), run.stdout[-1500:]
    assert {node: node_snapshot(container) for node, container in NODES.items()} == nodes_before
    assert gpustack_snapshot(keys["management"]) == gpustack_before
