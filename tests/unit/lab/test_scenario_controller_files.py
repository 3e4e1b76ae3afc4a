"""The files the lab's controller and bench scenarios write for the plays (lab/scenarios/<name>/steps.py), and the
pure parts of their steps: the settings parse to the mappings the plays were always given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lab import host
from lab.scenarios.bench_arms import steps as bench_arms
from lab.scenarios.patch_restart import steps as patch_restart
from lab.scenarios.queue_weights import steps as queue_weights
from lab.scenarios.sleep_wake import steps as sleep_wake


def test_sleep_wake_settings():
    assert yaml.safe_load(sleep_wake.SETTINGS) == {
        "pairserve_controller_enabled": True,
        "pairserve_controller_mode": "sleep",
        "pairserve_controller_sleep_replica": "qwen-node-b",
        "pairserve_controller_idle_minutes": 0.5,
        "pairserve_controller_drain_grace": 5,
        "pairserve_controller_wake_waiting": 2,
        "pairserve_controller_wake_prompt_tokens": 6000,
        "pairserve_controller_interval": 2,
        "pairserve_controller_hold": 4,
        "pairserve_controller_wake_timeout": 600,
        "pairserve_controller_replicas": [
            {"name": "qwen-node-a", "prefill_tps": 2000, "decode_tps": 250},
            {"name": "qwen-node-b", "prefill_tps": 2000, "decode_tps": 245},
        ],
    }


def test_queue_weights_base_settings():
    assert yaml.safe_load(queue_weights.BASE_SETTINGS) == {
        "pairserve_controller_enabled": True,
        "pairserve_controller_mode": "weights",
        "pairserve_controller_interval": 2,
        "pairserve_controller_hold": 4,
        "pairserve_controller_min_change": 5,
        "pairserve_controller_horizon": 5,
        "pairserve_controller_prior_prompt_tokens": 400,
        "pairserve_controller_prior_generation_tokens": 96,
    }


def test_arms_file_names_the_report_dir():
    text = bench_arms.arms_settings(Path("/srv/repo/.lab/bench_arms/reports"))
    assert yaml.safe_load(text) == {
        "pairserve_bench_label": "arms",
        "pairserve_bench_report_dir": "/srv/repo/.lab/bench_arms/reports",
        "pairserve_bench_arm_boot_timeout": 600,
        "pairserve_bench_arms": [{"name": "seqs-2", "node": "node-b", "replica": {"max_num_seqs": 2}}],
    }


def test_arms_file_text():
    assert bench_arms.arms_settings(Path("/r/.lab/bench_arms/reports")) == (
        "pairserve_bench_label: arms\n"
        "pairserve_bench_report_dir: /r/.lab/bench_arms/reports\n"
        "pairserve_bench_arm_boot_timeout: 600\n"
        "pairserve_bench_arms:\n"
        "  - name: seqs-2\n"
        "    node: node-b\n"
        "    replica: {max_num_seqs: 2}\n")


def test_arms_view_keys_models_and_instances_by_name():
    models = [{"name": "qwen-node-a", "id": 1, "replicas": 1}, {"name": "qwen-node-b", "id": 2, "replicas": 1}]
    instances = [{"model_name": "qwen-node-a", "id": 11, "state": "running"},
                 {"model_name": "qwen-node-b", "id": 12, "state": "starting"}]
    weights = {"qwen-node-a": 60, "qwen-node-b": 40}
    assert bench_arms.arms_view(models, instances, weights) == {
        "models": {"qwen-node-a": models[0], "qwen-node-b": models[1]},
        "instances": {"qwen-node-a": instances[0], "qwen-node-b": instances[1]},
        "weights": {"qwen-node-a": 60, "qwen-node-b": 40},
    }


def test_unpatch_args_are_the_module_arguments_with_the_snapshot_path_left_to_ansible():
    assert json.loads(patch_restart.UNPATCH_ARGS) == {
        "path": "{{ (pairserve_checkpoint_cache_dir | pairserve.llm.checkpoint_paths(pairserve_checkpoint_repo, "
                "pairserve_checkpoint_revision)).snapshot_path }}",
        "state": "restored",
    }


def test_instances_before_and_after():
    instances = [{"model_name": "qwen-node-a", "id": 7, "state": "running", "worker_id": 1},
                 {"model_name": "qwen-node-b", "id": 9, "state": "starting", "worker_id": 2}]
    assert patch_restart.instance_ids(instances) == {"qwen-node-a": 7, "qwen-node-b": 9}
    assert patch_restart.instance_states(instances) == {"qwen-node-a": {"id": 7, "state": "running"},
                                                        "qwen-node-b": {"id": 9, "state": "starting"}}


@pytest.mark.parametrize(("environ", "quota"), [({}, 50), ({"PAIRSERVE_LAB_SLOW_QUOTA": ""}, 50),
                                                ({"PAIRSERVE_LAB_SLOW_QUOTA": "30"}, 30)])
def test_slow_quota(environ, quota):
    assert queue_weights.slow_quota(environ) == quota


def test_slow_quota_is_a_whole_per_cent():
    with pytest.raises(host.LabError, match="PAIRSERVE_LAB_SLOW_QUOTA"):
        queue_weights.slow_quota({"PAIRSERVE_LAB_SLOW_QUOTA": "half"})


def test_baseline_results_is_the_last_baseline_by_name(tmp_path):
    for run in ("20250101-0900-queue-weights-baseline", "20250101-1000-queue-weights-baseline",
                "20250101-1100-queue-weights-report"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "results.json").write_text("{}")
    last = tmp_path / "20250101-1000-queue-weights-baseline" / "results.json"
    assert queue_weights.baseline_results(tmp_path) == last


def test_baseline_results_none_without_a_baseline(tmp_path):
    assert queue_weights.baseline_results(tmp_path) is None
    assert queue_weights.baseline_results(tmp_path / "missing") is None
