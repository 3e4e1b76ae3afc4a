"""The scrape targets verify.yml writes (Prometheus file_sd, pairserve_metrics_targets_file): every target of the
lab is scraped over HTTP and parsed with the Prometheus text parser of Prometheus's own Python client, and each job
answers with the metrics a dashboard reads (GPUStack's worker gauges per worker, vLLM's request counters per
replica), labelled with the host and replica the file says.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lab.api import ROUTE, STATE

TARGETS = STATE / "prometheus" / "pairserve.json"


@pytest.fixture(scope="module")
def groups():
    assert TARGETS.is_file(), f"verify.yml wrote no scrape targets at {TARGETS}"
    return json.loads(TARGETS.read_text())


def _scrape(target: str) -> dict:
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=20) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_the_file_has_one_group_per_endpoint_of_the_lab(groups):
    assert all(set(g) == {"targets", "labels"} and len(g["targets"]) == 1 for g in groups), groups
    jobs = sorted((g["labels"]["job"], g["labels"]["pairserve_host"]) for g in groups)
    assert jobs == [("gpustack-server", "node-a"), ("gpustack-worker", "node-a"), ("gpustack-worker", "node-b"),
                    ("vllm", "node-a"), ("vllm", "node-b")], jobs
    replicas = sorted(g["labels"]["pairserve_replica"] for g in groups if g["labels"]["job"] == "vllm")
    assert replicas == [f"{ROUTE}-node-a", f"{ROUTE}-node-b"]


def test_every_target_answers_prometheus_text_with_its_jobs_metrics(groups):
    for group in groups:
        labels, families = group["labels"], _scrape(group["targets"][0])
        assert families, group
        if labels["job"] == "gpustack-worker":
            info = families["gpustack:worker_node_os_info"]
            assert {s.labels["worker_name"] for s in info.samples} == {labels["pairserve_host"]}, group
        elif labels["job"] == "vllm":
            # prometheus_client drops the _total suffix from a counter family's name.
            assert "vllm:request_success" in families, (group, sorted(families)[:20])
            served = {s.labels.get("model_name") for s in families["vllm:request_success"].samples}
            assert labels["pairserve_replica"] in served, (group, served)
        else:
            assert any(name.startswith(("python_", "process_", "gpustack")) for name in families), group
