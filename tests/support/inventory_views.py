"""A sound two-node inventory as the validation play's views ({host: {variable: value}}), for tests of single rules:
change one variable, and every problem reported is that change's (inventory_check.problems). GROWN_GROUPS and
grown_views: the same site grown to three GPU nodes, node-c holding two pairs (docs/how-to/grow-the-site.md)."""

from __future__ import annotations

import atexit
import copy
import shutil
import tempfile
from pathlib import Path

from lab import pins, tools_archive

# A worker tools archive the nodes could use (the lab's), made once per session and removed at its end.
_TOOLS_DIR = tempfile.mkdtemp(prefix="pairserve-views-")
atexit.register(shutil.rmtree, _TOOLS_DIR, True)
TOOLS_ARCHIVE = Path(_TOOLS_DIR) / (
    "gpustack-tools-%s-linux-amd64.tar.gz" % pins.example()["pairserve_gpustack_version"])
tools_archive.write(pins.example()["pairserve_gpustack_version"], str(TOOLS_ARCHIVE))

GROUPS = {"gpustack_server": ["node-a"], "gpu_nodes": ["node-a", "node-b"]}
CONSTRAINTS = ["2.2.3"]
GOOD_VIEW = {
    "pairserve_lab_mode": False,
    "pairserve_gpustack_tools_archive": str(TOOLS_ARCHIVE),
    # the example inventory's pins (its digest and checkpoint placeholders replaced by valid values)
    **{name: pins.example()[name]
       for name in ("pairserve_gpustack_version", "pairserve_vllm_version", "pairserve_runner_image")},
    "pairserve_runner_image_digest": "sha256:" + "0" * 64, "pairserve_checkpoint_repo": "org/model",
    "pairserve_checkpoint_revision": "a" * 40, "pairserve_serving_mode": "pooled", "pairserve_route_name": "qwen",
    "pairserve_route_weights": {"node-a": 58, "node-b": 42}, "pairserve_model_name": "qwen",
    "pairserve_replica_profile": "multimodal", "pairserve_profiles": {}, "pairserve_replica_env": {},
    "pairserve_gpustack_api_port": 30080, "pairserve_gpustack_worker_port": 10150,
    "pairserve_gpustack_worker_metrics_port": 10151, "pairserve_gpustack_worker_name": None,
    "pairserve_gpustack_admin_password_set": True, "pairserve_gpustack_db_password_set": True,
    "pairserve_runtime_pause_image": "docker.io/gpustack/runtime:pause",
    "pairserve_runtime_pause_image_digest": "sha256:" + "1" * 64,
    "pairserve_runtime_health_image": "docker.io/gpustack/runtime:health",
    "pairserve_runtime_health_image_digest": "sha256:" + "2" * 64,
    # the verify role's timings, as its defaults have them
    "pairserve_verify_wait_timeout": 900, "pairserve_verify_poll_interval": 15, "pairserve_verify_reach_grace": 10,
    "pairserve_verify_request_timeout": 600,
}


def views(**per_host):
    """Each host's view: the sound one, updated with per_host[host] (host names with _ for -: node_b={...})."""
    out = {h: copy.deepcopy(GOOD_VIEW) for h in GROUPS["gpu_nodes"]}
    for host, changes in per_host.items():
        out[host.replace("_", "-")].update(changes)
    return out


# The grown site: node-c joins with two pairs (pairserve_expected_pairs: 2), weighed per pair.
GROWN_GROUPS = {"gpustack_server": ["node-a"], "gpu_nodes": ["node-a", "node-b", "node-c"]}
GROWN_WEIGHTS = {"node-a": 25, "node-b": 19, "node-c": [24, 32]}


def grown_views(**per_host):
    """The three-node views: every host's the sound one with GROWN_WEIGHTS, node-c with pairserve_expected_pairs: 2,
    then per_host's changes as views() takes them."""
    out = {h: dict(copy.deepcopy(GOOD_VIEW), pairserve_route_weights=copy.deepcopy(GROWN_WEIGHTS))
           for h in GROWN_GROUPS["gpu_nodes"]}
    out["node-c"]["pairserve_expected_pairs"] = 2
    for host, changes in per_host.items():
        out[host.replace("_", "-")].update(changes)
    return out
