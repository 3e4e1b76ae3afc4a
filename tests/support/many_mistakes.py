"""The inventory with many mistakes at once (tests/fixtures/inventories/many-mistakes) and the (host, variable) of
every mistake planted in it (its comments say which): the unit suite runs site.yml over it with no node at all,
the lab suite layers it over the running lab (lab/scenarios/default/tests/test_validation_refused.py)."""

from __future__ import annotations

import re
from pathlib import Path

MISTAKES = Path(__file__).resolve().parents[1] / "fixtures" / "inventories" / "many-mistakes"
EXPECTED = frozenset({
    ("node-a", "pairserve_gpustack_version"), ("node-a", "pairserve_vllm_version"),
    ("node-a", "pairserve_runner_image"), ("node-a", "pairserve_runner_image_digest"),
    ("node-a", "pairserve_checkpoint_repo"), ("node-a", "pairserve_checkpoint_revision"),
    ("node-a", "pairserve_gpustack_admin_password"), ("node-a", "pairserve_gpustack_db_password"),
    ("node-a", "pairserve_serving_mode"), ("node-a", "pairserve_route_name"), ("node-a", "pairserve_route_weights"),
    ("node-a", "pairserve_replica_env"), ("node-a", "pairserve_gpustack_worker_port"),
    ("node-a", "pairserve_gpustack_tls_key"), ("node-a", "pairserve_bench_weights_file"),
    ("node-a", "pairserve_controller_sleep_replica"), ("node-a", "pairserve_runtime_pause_image_digest"),
    ("node-a", "pairserve_runtime_health_image"), ("node-a", "pairserve_verify_reach_grace"), ("node-b", "pairserve_gpustack_worker_env"),
    ("node-b", "pairserve_replica_profile"), ("node-b", "pairserve_gpustack_worker_metrics_port"),
    ("node-b", "pairserve_model_name"), ("node-c", "pairserve_profiles"), ("node-c", "pairserve_gpustack_worker_name"),
    ("node-c", "pairserve_firewall_allowed_sources"), ("node-c", "pairserve_gpustack_worker_service_port_range"),
})
# What reports each one as a line of the validation play's message: "<hosts>: <variable>: <what is wrong> [fix in:
# <file>]", one problem a line, the same problem of several hosts on one line ("node-a, node-b: ...").
PROBLEM_RE = r"(?m)^\s*((?:node-[abc], )*node-[abc]): (pairserve_[a-z_]+): "


def reported(stdout):
    """{(host, variable)} of every problem line in the validation play's output."""
    return set((host, variable) for hosts, variable in re.findall(PROBLEM_RE, stdout) for host in hosts.split(", "))
