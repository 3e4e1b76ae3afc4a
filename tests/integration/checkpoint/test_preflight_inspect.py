"""The checkpoint's own files at the pinned revision, read from the hub before the download and before anything is
installed (control_plane.yml's order: the checkpoint role's preflight, then the replica role's check): a revision
without its tokenizer is refused naming the files, and a profile whose max_model_len is above the checkpoint's native
context, or that wants a vision tower the checkpoint has not, is refused naming the profile setting. Nothing is
written to the cache (a few KB of config.json go to a temporary directory)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from checkpoint_helpers import tree
from support.ansible_runner import run_playbook
from support.checkpoint_repo import COMMIT_A, REPO_ID, checkpoint_repo, config, files
from support.fakehub import Commit, FakeHub, HubFile, Repo

NO_TOKENIZER = "pairserve-test/no-tokenizer"
SHORT = "pairserve-test/short-context"
TEXT_ONLY = "pairserve-test/text-only"
INVENTORY = Path(__file__).with_name("inventory.yml")
PAIR = {"index": 0, "memory_total_mib": 16303, "compute_capability": "12.0", "fp4_path": "native"}


def _repo(repo_id, change):
    content = dict(files(shard_bytes=16))
    change(content)
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    return Repo(repo_id=repo_id, commits={commit: Commit(commit, content)}, refs={"main": commit})


def _config(**changes):
    def change(content):
        cfg = config()
        for key, value in changes.items():
            if key == "vision_config":
                cfg.pop("vision_config")
            else:
                cfg["text_config"][key] = value
        content["config.json"] = HubFile("config.json", (json.dumps(cfg, indent=2) + "\n").encode())
    return change


def _drop(*names):
    def change(content):
        for name in names:
            content.pop(name)
    return change


@pytest.fixture(scope="module")
def hub():
    server = FakeHub([checkpoint_repo(), _repo(NO_TOKENIZER, _drop("tokenizer.json", "tokenizer_config.json")),
                      _repo(SHORT, _config(max_position_embeddings=32768)),
                      _repo(TEXT_ONLY, _config(vision_config=None))]).start()
    yield server
    server.stop()


def _commit(hub, repo_id):
    return COMMIT_A if repo_id == REPO_ID else hub.state.repos[repo_id].refs["main"]


def _run(tmp_path, hub, hf_env, repo_id, profile="multimodal"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cache = tmp_path / "cache"
    play = [{"name": "preflight", "hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "Check that the checkpoint can be fetched onto this node",
         "ansible.builtin.include_role": {"name": "pairserve.llm.checkpoint", "tasks_from": "preflight"}},
        {"name": "Check this host's serving profile against its cards",
         "ansible.builtin.import_role": {"name": "pairserve.llm.replica", "tasks_from": "check"}},
        {"name": "Reached", "ansible.builtin.debug": {"msg": "after the checks"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    extra = {"pairserve_checkpoint_repo": repo_id, "pairserve_checkpoint_revision": _commit(hub, repo_id),
             "pairserve_hf_endpoint": hub.endpoint, "pairserve_checkpoint_cache_dir": str(cache),
             "pairserve_checkpoint_reserve_free_space": 0, "pairserve_node_python": sys.executable,
             "pairserve_vllm_version": "0.25.1", "pairserve_gpu": {"pairs": [PAIR]},
             "pairserve_replica_profile": profile}
    result = run_playbook(tmp_path / "play.yml", inventory=INVENTORY, extra_vars=extra, env=hf_env)
    assert tree(cache) == [], tree(cache)
    return result


@pytest.fixture()
def hf_env(tmp_path):
    return {"HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN": "", "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1",
            "HF_ENDPOINT": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


def _failed(result):
    failed = [r for r in result.results if r["_status"] == "failed"]
    assert failed and not [r for r in result.results if r["_task"] == "Reached"], result.stdout[-3000:]
    return failed[0]["msg"]


def test_the_pinned_checkpoint_is_read_before_the_download(tmp_path, hub, hf_env):
    result = _run(tmp_path, hub, hf_env, REPO_ID)
    assert result.rc == 0, result.stdout[-3000:]
    inspected = [r for r in result.results if r["_task"] == "Keep what the pinned checkpoint is, read from the Hub"]
    fact = inspected[0]["ansible_facts"]["pairserve_checkpoint_inspected"]
    assert fact["architecture"] == "Qwen3_5ForConditionalGeneration" and fact["native_context"] == 262144
    assert fact["vision"] is True and fact["hybrid"] is True and fact["quantization"] == "nvfp4"
    assert any(r["_task"] == "Reached" for r in result.results)


def test_a_revision_without_its_tokenizer_is_refused_naming_the_files(tmp_path, hub, hf_env):
    msg = _failed(_run(tmp_path, hub, hf_env, NO_TOKENIZER))
    assert msg.startswith("%s@%s has no tokenizer.json, tokenizer_config.json" % (NO_TOKENIZER, _commit(hub, NO_TOKENIZER)))
    assert "pairserve_checkpoint_revision" in msg


def test_a_max_model_len_above_the_native_context_is_refused_before_the_install(tmp_path, hub, hf_env):
    result = _run(tmp_path, hub, hf_env, SHORT, profile="multimodal")
    msg = _failed(result)
    assert "profile multimodal: max_model_len 65536 is longer than the checkpoint's native context 32768" in msg
    # the refusal the run ends with names the host and the variables that chose the profile
    last = " ".join([r for r in result.results if r["_status"] == "failed"][-1]["msg"].split())
    assert last.startswith("localhost: pairserve_replica_profile (multimodal) / pairserve_profiles: profile multimodal: "
                           "max_model_len 65536 is longer"), last


def test_a_vision_profile_on_a_text_only_checkpoint_is_refused(tmp_path, hub, hf_env):
    msg = _failed(_run(tmp_path, hub, hf_env, TEXT_ONLY, profile="multimodal"))
    assert "profile multimodal: vision is true but the checkpoint Qwen3_5ForConditionalGeneration has no vision tower" in msg
    assert _run(tmp_path / "text", hub, hf_env, TEXT_ONLY, profile="text").rc == 0
