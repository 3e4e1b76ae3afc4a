"""playbooks/rotate.yml, the key tags and the registration token tag, against the session's real GPUStack 2.2.3 on
PostgreSQL 15.

In the order an operator meets it: a run without a tag stops before anything is read, naming the tags; then
`--tags management_key,inference_key -e pairserve_rotate_before=<now>` at -vvv replaces both keys: GPUStack refuses
the old values (HTTP 401) and accepts the new ones, the secrets files hold the new values (root-only, the kept
`.next` file gone), the keys carry their second names; the old and new values appear nowhere in the -vvv output nor
in the recorded task results. Check mode first changes nothing; the same command again changes nothing; a run cut
short after the new value was made (its `.next` file left) is finished with that value; and the bootstrap's
registration (gpustack_api_key with alternate_name) finds the rotated keys unchanged.

Cost: 45 to 60 s on the session's server for the keys (2 cores shared, 2026-12-06: 56.6 s; five ansible-playbook
runs and six module runs), about 20 s for the registration token (two runs).
"""

from __future__ import annotations

import datetime
import json
import stat
import sys
import time
import urllib.error
import urllib.request

import pytest

from lab import pins
from support.ansible_runner import REPO, run_module, run_playbook
from support.recap import parse_recap

pytestmark = [pytest.mark.slow]

ROTATE = REPO / "playbooks" / "rotate.yml"
OLD = {"management": "sk-pairserve-rotation-old-management-0001", "inference": "sk-pairserve-rotation-old-inference-0001"}
NAMES = {"management": "rot-management", "inference": "rot-inference"}


def status_of(url, key):
    req = urllib.request.Request(url)
    req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - 127.0.0.1 only
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


PROBE = {"management": "/v2/users/me", "inference": "/v1/models"}


def test_rotate_keys_old_refused_new_accepted_rerun_unchanged(gpustack_server, tmp_path):  # pylint: disable=too-many-locals
    server = gpustack_server
    started = time.monotonic()
    api_port = int(server.api_url.rsplit(":", 1)[1])
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    for kind, value in OLD.items():
        made = run_module("gpustack_api_key", {**server.auth_args, "name": NAMES[kind], "value": value, "scope": [kind]})
        assert not made.failed, made.result
        (secrets / f"{kind}-api-key").write_text(value + "\n")
        assert status_of(server.api_url + PROBE[kind], value) == 200, kind
    host = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "pairserve_gpustack_version": pins.GPUSTACK, "pairserve_gpustack_api_port": api_port,
        "pairserve_gpustack_admin_password": server.admin_password, "pairserve_gpustack_secrets_dir": str(secrets),
        "pairserve_gpustack_management_key_name": NAMES["management"],
        "pairserve_gpustack_inference_key_name": NAMES["inference"],
    }
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps({"all": {"children": {"gpustack_server": {"hosts": {"gs": host}}, "gpu_nodes": {"hosts": {}}}}}))
    try:
        untagged = run_playbook(ROTATE, inventory=inv, timeout=300)
        assert untagged.rc != 0
        assert "management_key, inference_key, registration_token, certificate" in untagged.stdout, untagged.stdout[-3000:]
        assert (secrets / "inference-api-key").read_text().strip() == OLD["inference"]

        # After the keys were made: GPUStack's created_at is earlier than this time.
        time.sleep(1)
        before = datetime.datetime.now(datetime.timezone.utc).isoformat()
        env = {"ANSIBLE_RUN_TAGS": "management_key,inference_key", "ANSIBLE_VERBOSITY": "3"}
        checked = run_playbook(ROTATE, inventory=inv, extra_vars={"pairserve_rotate_before": before}, check=True,
                               env={"ANSIBLE_RUN_TAGS": "management_key,inference_key"}, timeout=300)
        assert checked.rc == 0, checked.stdout[-4000:]
        assert "was created before %s: it is replaced now" % before in checked.stdout
        assert sorted(k["name"] for k in server.items("/v2/api-keys") if k["name"].startswith("rot-")) == sorted(NAMES.values())
        assert sorted(p.name for p in secrets.iterdir()) == ["inference-api-key", "management-api-key"]
        rotated = run_playbook(ROTATE, inventory=inv, extra_vars={"pairserve_rotate_before": before}, env=env,
                               timeout=300)
        assert rotated.rc == 0, rotated.stdout[-4000:] + rotated.stderr[-2000:]
        took = time.monotonic() - started
        new = {kind: (secrets / f"{kind}-api-key").read_text().strip() for kind in OLD}
        for kind in OLD:
            assert new[kind].startswith("sk-pairserve-") and new[kind] != OLD[kind], kind
            assert status_of(server.api_url + PROBE[kind], OLD[kind]) == 401, kind
            assert status_of(server.api_url + PROBE[kind], new[kind]) == 200, kind
            assert stat.S_IMODE((secrets / f"{kind}-api-key").stat().st_mode) == 0o600
            assert not (secrets / f"{kind}-api-key.next").exists()
        keys = {k["name"]: k for k in server.items("/v2/api-keys")}
        assert NAMES["inference"] + "-alt" in keys and NAMES["inference"] not in keys, sorted(keys)
        assert keys[NAMES["management"] + "-alt"]["scope"] == ["management"]
        recorded = json.dumps(rotated.results)
        for value in list(OLD.values()) + list(new.values()):
            assert value not in rotated.stdout and value not in rotated.stderr, "a key value in the -vvv output"
            assert value not in recorded, "a key value in the recorded task results"

        again = run_playbook(ROTATE, inventory=inv, extra_vars={"pairserve_rotate_before": before},
                             env={"ANSIBLE_RUN_TAGS": "management_key,inference_key"}, timeout=300)
        assert again.rc == 0, again.stdout[-3000:]
        assert (parse_recap(again.stdout) or {}).get("gs", {}).get("changed") == 0, again.stdout[-3000:]
        assert {kind: (secrets / f"{kind}-api-key").read_text().strip() for kind in OLD} == new

        # A run cut short after the new value was made resumes with that value (the .next file), whatever the time.
        resumed = "sk-pairserve-rotation-resumed-inference-0001"
        (secrets / "inference-api-key.next").write_text(resumed + "\n")
        (secrets / "inference-api-key.next").chmod(0o600)
        finished = run_playbook(ROTATE, inventory=inv, extra_vars={"pairserve_rotate_before": before},
                                env={"ANSIBLE_RUN_TAGS": "inference_key"}, timeout=300)
        assert finished.rc == 0, finished.stdout[-3000:]
        assert (secrets / "inference-api-key").read_text().strip() == resumed
        assert status_of(server.api_url + PROBE["inference"], resumed) == 200
        assert status_of(server.api_url + PROBE["inference"], new["inference"]) == 401
        assert not (secrets / "inference-api-key.next").exists()
        new["inference"] = resumed

        # site.yml's bootstrap registers the keys under either name: nothing to change after a rotation.
        for kind in OLD:
            registered = run_module("gpustack_api_key", {
                **server.auth_args, "name": NAMES[kind], "alternate_name": NAMES[kind] + "-alt", "value": new[kind],
                "scope": [kind]})
            assert not registered.failed and not registered.changed, registered.result
        print(f"rotation of two keys: {took:.1f} s; whole test {time.monotonic() - started:.1f} s")
    finally:
        for kind in OLD:
            run_module("gpustack_api_key", {**server.auth_args, "name": NAMES[kind],
                                            "alternate_name": NAMES[kind] + "-alt", "state": "absent"})


def test_registration_token_checked_not_replaced_and_never_printed(gpustack_server, tmp_path):
    """GPUStack 2.2.3 cannot replace the token: the tag reads it, checks every worker configuration holds it, says it
    was not replaced, and names a node whose configuration holds another one (it would fail its next start)."""
    server = gpustack_server
    token = server._token  # pylint: disable=protected-access
    api_port = int(server.api_url.rsplit(":", 1)[1])
    config = tmp_path / "worker"
    config.mkdir(mode=0o700)
    (config / "worker.yaml").write_text(json.dumps({"server_url": server.api_url, "token": token, "worker_name": "wk"}))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps({"all": {"children": {
        "gpustack_server": {"hosts": {"gs": dict(local, pairserve_gpustack_api_port=api_port,
                                                 pairserve_gpustack_admin_password=server.admin_password,
                                                 pairserve_gpustack_cluster_name=server.cluster_name)}},
        "gpu_nodes": {"hosts": {"wk": dict(local, pairserve_gpustack_worker_config_dir=str(config))}}}}}))
    env = {"ANSIBLE_RUN_TAGS": "registration_token", "ANSIBLE_VERBOSITY": "3"}
    checked = run_playbook(ROTATE, inventory=inv, env=env, timeout=300)
    assert checked.rc == 0, checked.stdout[-4000:]
    said = checked.by_task
    assert said["Say that the token is not replaced, and why"]["msg"].startswith("The registration token is NOT replaced")
    assert said["Stop when the worker would fail its next start"]["msg"] == \
        "wk: the worker configuration holds the cluster's registration token."
    assert all(c["changed"] == 0 for c in (parse_recap(checked.stdout) or {"?": {"changed": 1}}).values())
    assert token not in checked.stdout + checked.stderr and token not in json.dumps(checked.results)

    (config / "worker.yaml").write_text(json.dumps({"server_url": server.api_url, "token": "gpustack_0000_stale",
                                                    "worker_name": "wk"}))
    stale = run_playbook(ROTATE, inventory=inv, env=env, timeout=300)
    assert stale.rc == 2, stale.stdout[-3000:]
    refused = stale.by_task["Stop when the worker would fail its next start"]
    assert refused["_host"] == "wk" and refused["_status"] == "failed", refused
    assert "does not hold the registration token of the cluster" in refused["msg"] and refused["msg"].startswith("wk: ")
    assert token not in stale.stdout + stale.stderr and "gpustack_0000_stale" not in stale.stdout + stale.stderr
