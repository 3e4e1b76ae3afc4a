"""The tokenizer patch undone on both nodes, then site.yml under the request loop, then site.yml once more.

As after a run that left a checkpoint unpatched (or a new export): site.yml patches it again and, since vLLM reads
the tokenizer only at start-up, restarts each node's replicas one node at a time, drained from the route first. The
request loop counts every request meanwhile; the plays' task results are kept as JSON lines.

Leaves in .lab/patch_restart/: unpatch.* (the ad-hoc tokenizer_patch run), converge.* and rerun.* (site.yml twice),
load.json (the request loop's summary), instances-before.json ({model: instance id}) and instances-after.json
({model: {id, state}}).
"""

from __future__ import annotations

import json
from pathlib import Path

from lab import host, plays
from lab.api import items
from lab.scenarios import Scenario

# The module's arguments for the ad-hoc run: the checkpoint's snapshot path is Jinja, rendered by Ansible per node
# from the inventory (as the checkpoint role finds it).
UNPATCH_ARGS = ('{"path": "{{ (pairserve_checkpoint_cache_dir | pairserve.llm.checkpoint_paths('
                'pairserve_checkpoint_repo, pairserve_checkpoint_revision)).snapshot_path }}", "state": "restored"}')


def instance_ids(instances: list) -> dict:
    """{model name: instance id}."""
    return {i["model_name"]: i["id"] for i in instances}


def instance_states(instances: list) -> dict:
    """{model name: {id, state}}."""
    return {i["model_name"]: {"id": i["id"], "state": i["state"]} for i in instances}


def snapshot(path: Path, key: str, view) -> None:
    """GPUStack's model instances now, seen through `view`, into `path` (JSON)."""
    try:
        data = view(items("/v2/model-instances", key))
    except (AssertionError, OSError, ValueError) as err:
        raise host.LabError("GPUStack's model instances for %s: %s" % (path, err)) from err
    Path(path).write_text(json.dumps(data), encoding="utf-8")


def run(scenario: Scenario) -> None:
    """The patch undone, site.yml under the request loop, GPUStack's instances before and after, site.yml again."""
    scenario.prepare("*.rc", "*.jsonl", "*.json")
    key = host.secret("node-a", "management-api-key")
    snapshot(scenario.path("instances-before.json"), key, instance_ids)
    scenario.say("the tokenizer patch undone on both nodes (tokenizer_patch state=restored)")
    plays.adhoc(scenario.path("unpatch.log"), "gpu_nodes", "pairserve.llm.tokenizer_patch", UNPATCH_ARGS)
    load = scenario.load().start()
    scenario.say("site.yml patches again and restarts the replicas, drained, under the request loop")
    scenario.play("converge", "site.yml")
    load.stop()
    snapshot(scenario.path("instances-after.json"), key, instance_states)
    scenario.say("site.yml again (nothing to restart: changed=0)")
    scenario.play("rerun", "site.yml")
