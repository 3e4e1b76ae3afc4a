"""The lab's vLLM profile, read from the lab inventory, its one owner (lab/inventory/group_vars/all/serving.yml,
`pairserve_profiles.lab`): the lab's replicas, the integration tier's CPU vLLM servers and the unit tests that
render it all use the same settings."""

from __future__ import annotations

from pathlib import Path

import yaml

SERVING = Path(__file__).resolve().parents[1] / "lab" / "inventory" / "group_vars" / "all" / "serving.yml"


def lab_profile(name: str = "lab", **overrides) -> dict:
    """The lab profile as a vllm_args profile dict named ``name``, with ``overrides`` (profile keys) applied."""
    profiles = yaml.safe_load(SERVING.read_text())["pairserve_profiles"]
    profile = dict(profiles["lab"])
    profile.update(overrides)
    profile["name"] = name
    return profile


def lab_replica_env() -> dict:
    """The plain (untemplated, non-VLLM_) entries of the lab inventory's ``pairserve_replica_env``: what every lab
    replica gets for running on a CPU, which the integration tier's servers get too. The VLLM_ ones (thread binding,
    KV space) are per server and set by lab/vllm_server.py."""
    env = yaml.safe_load(SERVING.read_text()).get("pairserve_replica_env") or {}
    return {str(k): str(v) for k, v in env.items() if "{{" not in str(v) and not str(k).startswith("VLLM_")}
