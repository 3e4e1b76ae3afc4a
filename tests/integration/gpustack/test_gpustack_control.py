"""gpustack_cluster, gpustack_api_key and gpustack_info against a real GPUStack 2.2.3 on PostgreSQL."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from gpustack_helpers import four_steps
from support.ansible_runner import run_module, run_playbook
from support.ports import free_port

pytestmark = pytest.mark.slow


def _status_with_key(api_url: str, path: str, key: str) -> int:
    req = urllib.request.Request(api_url + path, headers={"Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - 127.0.0.1
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_info_sees_the_worker_ready_with_its_two_gpus(gpustack_server):
    res = run_module("gpustack_info", {**gpustack_server.key_args, "gather": ["workers", "gpus", "clusters"],
                                       "cluster": gpustack_server.cluster_name})
    assert not res.failed, res.result
    assert not res.changed
    assert [(w["name"], w["state"]) for w in res["workers"]] == [(gpustack_server.worker_name, "ready")]
    assert sorted(g["index"] for g in res["gpus"]) == [0, 1]
    assert {g["worker_name"] for g in res["gpus"]} == {gpustack_server.worker_name}
    assert [c["name"] for c in res["clusters"]] == [gpustack_server.cluster_name]
    # A name filter that matches nothing gives empty lists, not everything.
    none = run_module("gpustack_info", {**gpustack_server.key_args, "gather": ["workers"], "names": ["nope"]})
    assert none["workers"] == []


def test_cluster_four_steps_diff_and_absent(gpustack_server):
    args = {**gpustack_server.auth_args, "name": "c-four", "description": "first"}
    check, apply, _idem, again = four_steps("gpustack_cluster", args)
    assert check["diff"]["after"] == {"name": "c-four", "description": "first", "provider": "Docker"}
    assert check["cluster"].get("id") is None and check["registration_token"] is None
    cluster_id = apply["cluster"]["id"]
    assert again["cluster"]["id"] == cluster_id
    assert apply["registration_token"] is None  # not asked for

    changed = run_module("gpustack_cluster", dict(args, description="second"), diff=True)
    assert changed.changed
    assert changed["diff"]["before"] == {"description": "first"} and changed["diff"]["after"] == {"description": "second"}
    listed = [c for c in gpustack_server.items("/v2/clusters") if c["name"] == "c-four"]
    assert listed[0]["description"] == "second"

    gone = run_module("gpustack_cluster", {**gpustack_server.auth_args, "name": "c-four", "state": "absent"})
    assert gone.changed
    assert not [c for c in gpustack_server.items("/v2/clusters") if c["name"] == "c-four" and not c.get("deleted_at")]
    again = run_module("gpustack_cluster", {**gpustack_server.auth_args, "name": "c-four", "state": "absent"})
    assert not again.changed and not again.failed


def test_cluster_with_workers_cannot_be_removed_and_says_why(gpustack_server):
    res = run_module("gpustack_cluster", {**gpustack_server.key_args, "name": gpustack_server.cluster_name,
                                          "state": "absent"})
    assert res.failed
    assert "has workers, cannot be deleted" in res["msg"] and res["status"] == 409


def test_registration_token_is_returned_only_when_asked_and_is_hidden_by_no_log(gpustack_server, tmp_path):
    play = tmp_path / "token.yml"
    play.write_text(f"""
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Cluster and token
      pairserve.llm.gpustack_cluster:
        api_url: {gpustack_server.api_url}
        api_key: {gpustack_server.api_key}
        name: {gpustack_server.cluster_name}
        return_registration_token: true
      register: reg
      no_log: true
    - name: Show the token length only
      ansible.builtin.debug:
        msg: "{{{{ reg.registration_token | length }}}} {{{{ reg.registration_token[:9] }}}} {{{{ reg.cluster.id }}}}"
""")
    res = run_playbook(play, inventory="localhost,")
    assert res.rc == 0, res.stdout + res.stderr
    hidden, shown = res.results[0], res.results[1]
    assert "registration_token" not in hidden  # no_log censors the displayed result
    length, prefix, cid = shown["msg"].split()
    assert prefix == "gpustack_" and int(length) > 30 and int(cid) == gpustack_server.cluster_id
    token = gpustack_server.api("GET", f"/v2/clusters/{gpustack_server.cluster_id}/registration-token")["token"]
    assert token not in res.stdout


def test_api_key_four_steps_scopes_enforced_and_value_rotation(gpustack_server):
    value = "pairserve-inference-0001"
    args = {**gpustack_server.auth_args, "name": "pytest-inference", "value": value, "scope": ["inference"],
            "description": "clients"}
    check, apply = four_steps("gpustack_api_key", args)[:2]
    assert check["diff"]["after"]["scope"] == ["inference"]
    assert value not in json.dumps(apply.result)  # the fixed value is never returned
    assert apply["api_key"]["is_custom"] is True

    # GPUStack enforces the scope: an inference key cannot manage, but does authenticate.
    assert _status_with_key(gpustack_server.api_url, "/v2/clusters", value) == 403
    assert _status_with_key(gpustack_server.api_url, "/v1/models", value) == 200
    assert _status_with_key(gpustack_server.api_url, "/v1/models", "pairserve-not-a-key") == 401

    changed = run_module("gpustack_api_key", dict(args, scope=["inference", "management"]), diff=True)
    assert changed.changed and not changed["replaced"]
    assert changed["diff"]["after"] == {"scope": ["inference", "management"]}
    assert _status_with_key(gpustack_server.api_url, "/v2/clusters", value) == 200

    new_value = "pairserve-inference-0002"
    rotated = run_module("gpustack_api_key", dict(args, value=new_value), diff=True)
    assert rotated.changed and rotated["replaced"], rotated.result
    assert _status_with_key(gpustack_server.api_url, "/v1/models", new_value) == 200
    assert _status_with_key(gpustack_server.api_url, "/v1/models", value) == 401
    assert not run_module("gpustack_api_key", dict(args, value=new_value)).changed

    gone = run_module("gpustack_api_key", {**gpustack_server.auth_args, "name": "pytest-inference", "state": "absent"})
    assert gone.changed
    assert _status_with_key(gpustack_server.api_url, "/v1/models", new_value) == 401


def test_generated_key_value_is_returned_once(gpustack_server):
    args = {**gpustack_server.key_args, "name": "pytest-generated", "scope": ["management"]}
    first = run_module("gpustack_api_key", args)
    assert first.changed and first["value"].startswith("gpustack_")
    assert _status_with_key(gpustack_server.api_url, "/v2/clusters", first["value"]) == 200
    second = run_module("gpustack_api_key", args)
    assert not second.changed and "value" not in second.result
    run_module("gpustack_api_key", dict(args, state="absent"))


def test_wrong_admin_password_names_the_cause(gpustack_server):
    res = run_module("gpustack_info", {"api_url": gpustack_server.api_url, "password": "wrong-password",
                                       "gather": ["workers"]})
    assert res.failed and res["status"] == 401
    assert "GPUStack rejected username 'admin' / password" in res["msg"]
    assert "wrong-password" not in res.stdout + res.stderr


def test_unreachable_server_names_the_cause():
    port = free_port()  # nothing listens on it
    res = run_module("gpustack_cluster", {"api_url": f"http://127.0.0.1:{port}", "api_key": "x", "name": "c",
                                          "retries": 1, "timeout": 5})
    assert res.failed
    assert f"cannot reach GPUStack at http://127.0.0.1:{port}" in res["msg"] and "refused" in res["msg"].lower()
