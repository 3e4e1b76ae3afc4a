"""meta/runtime.yml's action groups: group/pairserve.llm.gpustack holds every module built on the GPUStack connection
options (module_utils/gpustack.gpustack_argument_spec) and group/pairserve.llm.openai every module that talks to one
OpenAI-compatible endpoint (a top-level base_url; llm_bench takes a list of targets and is in neither). A play sets
them once with module_defaults, proven here through Ansible against a local server that answers GPUStack's list
format and checks the key."""

from __future__ import annotations

import re

import yaml

from support.ansible_runner import REPO, run_local_play
from support.local_http import JsonStub, gpustack_page

MODULES = REPO / "plugins" / "modules"


def groups():
    return yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["action_groups"]


def modules_using(pattern: str) -> set:
    return {p.stem for p in MODULES.glob("*.py") if re.search(pattern, p.read_text())}


def test_each_group_holds_every_module_of_its_kind_and_nothing_else():
    found = groups()
    assert set(found["gpustack"]) == modules_using(r"gpustack_argument_spec\(\)"), found["gpustack"]
    # a top-level base_url (argument_spec's own options, 12 spaces in): llm_bench's is per target, not shared
    assert set(found["openai"]) == modules_using(r'\n {12}base_url=dict\(type="str", required=True'), found["openai"]
    for members in found.values():
        assert len(members) == len(set(members)) and all((MODULES / f"{m}.py").exists() for m in members), members


def test_module_defaults_set_once_reach_a_gpustack_module(tmp_path):
    workers = [{"id": 1, "name": "node-a", "state": "ready"}]

    def api(request):
        if request.headers.get("Authorization") != "Bearer sk-group":
            return 401, {"detail": "Invalid authentication credentials"}
        return (200, gpustack_page(workers)) if request.path == "/v2/workers" else (404, {"detail": "no"})

    with JsonStub(api) as server:
        play_vars = {"server_url": server.url}
        tasks = [{"name": "Workers", "pairserve.llm.gpustack_info": {"gather": ["workers"]}}]
        # the task names no connection option: the play's module_defaults for the group give them
        playbook_tasks = [{"name": "With the group's defaults", "module_defaults": {
            "group/pairserve.llm.gpustack": {"api_url": "{{ server_url }}", "api_key": "sk-group"}},
            "block": tasks}]
        res = run_local_play(tmp_path, "Action group", playbook_tasks, play_vars)
    assert res.rc == 0, res.stdout[-2000:]
    assert [w["name"] for w in res.by_task["Workers"]["workers"]] == ["node-a"], res.by_task["Workers"]
