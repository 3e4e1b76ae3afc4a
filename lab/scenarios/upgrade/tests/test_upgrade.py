"""The upgrade scenario on the lab (`python -m lab scenario upgrade`, molecule/upgrade's side effect), judged
afterwards:

0. the previous pins (lab/inventory/upgrade/previous.yml: GPUStack 2.2.3, vLLM 0.25.1) rolled out on the lab;
1. playbooks/upgrade.yml with a vLLM pin that has no runner image: the play fails before any drain, names the
   pin, and GPUStack is as it was;
2. a runner image that exists but cannot serve: node-a is drained, its replica rolled out on it, verification
   fails, the previous registration and the weights are put back and the play stops, naming what failed;
3. ONE pins change (lab/inventory/upgrade/next.yml: GPUStack 2.3.0, vLLM 0.27.1, and the checkpoint revision moved
   to the lab hub's next commit): the database backed up on the server node, the server on 2.3.0, then each node in
   turn drained, its worker moved to 2.3.0 (with the tool versions 2.3.0 checks), its replica re-registered on the
   new image and snapshot, rolled out, verified and given its weight back; every registration (ids of clusters,
   workers, models, routes, targets, API keys) survives and the keys still work;
4. the same pins again: changed=0;
5. the route answered every request of the loops that ran meanwhile (the goal: 0 failed); the loop pauses only
   while GPUStack's server itself restarts (it proxies every request), and that gap is measured.
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
import testinfra
import yaml

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import pinned_backend_version
from lab import pins
from lab.api import API, REPO, ROUTE, STATE, WEIGHTS, call, items, read_keys, route_weights
from support.lab_suite import load_summary, rc, results, skip_unless_all_steps
from support.recap import items as result_items, module_args

DIR = STATE / "upgrade"
HUB = json.loads((STATE / "hub.json").read_text()) if (STATE / "hub.json").exists() else {}
INVENTORY = REPO / "lab" / "inventory"
PREV, NEXT = pins.PREVIOUS, pins.NEXT  # lab/inventory/upgrade/{previous,next}.yml


def runner_image(step_pins) -> str:
    """The runner image of a step's vLLM as the lab pins it: the registry repository of pins.yml for that version, at
    the digest the lab registry gave the image pushed for the step (lab/scenarios/upgrade/steps.py use_pins:
    .lab/runner-<version>.digest)."""
    version = step_pins["pairserve_vllm_version"]
    image = pins.resolved(dict(pins.lab(), pairserve_vllm_version=version), "pairserve_runner_image")
    return "%s@%s" % (image, (STATE / f"runner-{version}.digest").read_text().strip())


def runner_version(step_pins):
    """The vLLM backend version that carries the step's runner image (the replica role registers it)."""
    return pinned_backend_version(step_pins["pairserve_vllm_version"], runner_image(step_pins))


HOSTS = ("node-a", "node-b")
# The tool versions each GPUStack release's worker checks (what the lab's stub archive must name).
TOOL_VERSIONS = yaml.safe_load((REPO / "lab" / "stand_ins" / "gpustack-tools" / "tool-versions.yml").read_text())
WORKER_PORT = {host: (yaml.safe_load((INVENTORY / "host_vars" / f"{host}.yml").read_text()) or {}).get(
    "pairserve_gpustack_worker_port",
    yaml.safe_load((REPO / "roles" / "gpustack_worker" / "defaults" / "main.yml").read_text())[
        "pairserve_gpustack_worker_port"]) for host in HOSTS}


def ran(step: str, what: str) -> None:
    """Fail a check whose step left no exit status (the scenario's steps stop after a failed previous-pins step):
    a check that did not run has proved nothing, so it must not pass as skipped."""
    if not (DIR / f"{step}.rc").exists():
        pytest.fail(f"{what}: the step did not run (no {DIR / step}.rc; see the previous-pins check and "
                    f"{DIR / 'previous.log'})", pytrace=False)


def weight_changes(run) -> list[tuple[str, str]]:
    """(host, drain|restore) for every route weight change of the maintenance role (tasks/weights.yml: gpustack_route
    with drain, or with the planned targets), in the order the play made them."""
    return [(r["_host"], "drain" if module_args(i).get("drain") else "restore")
            for r in run.where(action="pairserve.llm.gpustack_route", role="maintenance",
                               task_file="maintenance/tasks/weights.yml", status="ok")
            for i in result_items(r) if module_args(i)]


def failure(run, host: str) -> str:
    """The message the play stopped with on `host` (its one failed, not ignored, result), whitespace folded."""
    failed = [r for r in run.where(host=host, status="failed") if not r.get("_ignored")]
    assert failed, f"{run.source}: no failed result on {host}"
    return " ".join(str(failed[-1].get("msg", "")).split())


def flat(log: str) -> str:
    """The log with every run of whitespace as one space: the YAML callback wraps long messages over lines."""
    return re.sub(r"\s+", " ", log)


def node(host: str):
    return testinfra.get_host(f"podman://pairserve-lab-{host}")


def version_at(url: str) -> str:
    """The version an HTTP /version endpoint answers (GPUStack and vLLM both have one), without a leading v."""
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - 127.0.0.1 only
        return json.load(resp)["version"].lstrip("v")


@pytest.fixture(scope="module")
def before():
    """GPUStack and the replicas as the scenario's steps recorded them right before the new pins."""
    path = DIR / "before.json"
    if not path.exists():
        pytest.fail(f"no {path}: the new pins' step did not run", pytrace=False)
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def keys():
    return read_keys()


def test_the_previous_pins_rolled_out_one_node_at_a_time():
    log = flat((DIR / "previous.log").read_text())
    assert rc(DIR / "previous.rc") == 0, log[-4000:]
    # The default lab already runs vLLM 0.25.1 from its registry by digest, which is the previous pins' image: the
    # play finds nothing to change on the replicas, or (a push that gave the image another digest) rolls them to it.
    for host in HOSTS:
        assert re.search(rf"{host}: (replicas unchanged|replica\(s\) {ROUTE}-{host} change \([^)]*backend_version)",
                         log), f"{host}'s replica is not on {runner_image(PREV)}"
    assert "worker GPUStack" not in log, "the previous pins moved a worker"
    run = results(DIR / "previous.log")
    assert all(r["failed"] == 0 for r in run.recap().values()), run.where(status="failed")


def test_the_bad_pin_is_refused_before_anything_changes():
    run = results(DIR / "bad-pin.log")
    assert rc(DIR / "bad-pin.rc") != 0, "upgrade.yml accepted a vLLM pin that has no runner image"
    # The message is the feature: it names the step, the pin and the state the node is left in.
    said = failure(run, "node-a")
    assert "Upgrade of node-a failed at" in said and "runner image" in said, said
    assert "localhost/pairserve-vllm-cpu:0.99.0" in said, said
    assert "no replica had changed yet" in said and "route weights untouched" in said, said
    # The refusal came before the drain: no weight was touched and node-b never started.
    assert weight_changes(run) == [], weight_changes(run)
    assert "node-b" not in run.hosts(), "the play went on to node-b after node-a failed"
    assert run.recap()["node-a"]["changed"] == 0, run.where(changed=True)


def test_a_replica_that_fails_verification_is_rolled_back():
    skip_unless_all_steps(DIR, "the rollback of a runner image that cannot serve")
    run = results(DIR / "broken-image.log")
    assert rc(DIR / "broken-image.rc") != 0, "upgrade.yml accepted a runner image that cannot serve"
    # It got as far as the drain and the rollout, failed in verification, and put the weights back.
    assert weight_changes(run) == [("node-a", "drain"), ("node-a", "restore")], weight_changes(run)
    said = failure(run, "node-a")
    assert "Upgrade of node-a failed at" in said, said
    assert f"Rolled back: {ROUTE}-node-a" in said and "route weights restored" in said, said
    assert "node-b" not in run.hosts(), "the play went on to node-b after node-a failed"
    # The previous registration went back (the maintenance role's rollback, gpustack_model per replica).
    rollback = run.where(host="node-a", action="pairserve.llm.gpustack_model",
                         task_file="maintenance/tasks/rollback.yml", status="ok")
    rolled_back = [module_args(i).get("name") for r in rollback for i in result_items(r) if module_args(i)]
    assert rolled_back == [f"{ROUTE}-node-a"], rolled_back


def test_the_new_pins_rolled_out_one_node_at_a_time(keys):
    ran("upgrade-1", "the new pins")
    log = (DIR / "upgrade-1.log").read_text()
    assert rc(DIR / "upgrade-1.rc") == 0, log[-4000:]
    assert HUB.get("next_revision"), "the lab hub has no next commit (lab/hub.py)"
    assert HUB["next_revision"] != HUB["revision"]
    models = {m["name"]: m for m in items("/v2/models", keys["management"])}
    for host in HOSTS:
        assert models[f"{ROUTE}-{host}"]["backend_version"] == runner_version(NEXT)
        assert models[f"{ROUTE}-{host}"]["local_path"].endswith("/" + HUB["next_revision"]), \
            models[f"{ROUTE}-{host}"]["local_path"]
    # One node at a time: node-a drained and restored before node-b was drained.
    run = results(DIR / "upgrade-1.log")
    assert weight_changes(run) == [(h, what) for h in HOSTS for what in ("drain", "restore")], weight_changes(run)
    assert all(c["failed"] == 0 for c in run.recap().values()), run.where(status="failed")
    # The server first, and each node's worker in its own turn.
    log = flat(log)
    assert f"GPUStack server {PREV['pairserve_gpustack_version']} -> {NEXT['pairserve_gpustack_version']}, ready." in log
    for host in HOSTS:
        assert re.search(rf"{host}: replica\(s\) {ROUTE}-{host} change \([^)]*\); worker GPUStack "
                         rf"{re.escape(PREV['pairserve_gpustack_version'])} -> {re.escape(NEXT['pairserve_gpustack_version'])}\.",
                         log), f"upgrade.yml did not say it moves {host}'s replica and worker"


def test_the_replicas_ran_the_previous_pins_before(before):
    assert before["server_version"].lstrip("v") == PREV["pairserve_gpustack_version"]
    models = {m["name"]: m for m in before["/v2/models"]}
    for host in HOSTS:
        assert models[f"{ROUTE}-{host}"]["backend_version"] == runner_version(PREV)
        # What answered on the replica's port was vLLM itself, at the previous pin.
        assert before["replica_vllm"][f"{ROUTE}-{host}"] == PREV["pairserve_vllm_version"], before["replica_vllm"]


def test_the_database_was_backed_up_on_the_server_node():
    ran("upgrade-1", "the backup before GPUStack's new version")
    host = node("node-a")
    pattern = (f"/var/backups/pairserve/gpustack-{PREV['pairserve_gpustack_version']}-before-"
               f"{NEXT['pairserve_gpustack_version']}-*.sql.gz")
    found = host.run(f"ls -1 {pattern}")
    assert found.rc == 0, f"no backup {pattern} on node-a: {found.stderr}"
    dump = found.stdout.split()[-1]
    assert host.file(dump).size > 0, f"{dump} is empty"
    assert host.run(f"gzip -t {dump}").rc == 0, f"{dump} is not a whole gzip file"
    # The dump holds the registrations the upgrade must keep (the replicas' rows), not an empty schema.
    for host_name in HOSTS:
        assert host.run(f"zcat {dump} | grep -c -- '{ROUTE}-{host_name}'").stdout.strip() not in ("", "0"), \
            f"{dump} has no row naming {ROUTE}-{host_name}"


def test_the_server_answers_the_new_version():
    ran("upgrade-1", "the server on GPUStack's new version")
    assert version_at(API + "/version") == NEXT["pairserve_gpustack_version"]
    assert node("node-a").run("readlink /opt/gpustack/current").stdout.strip() == NEXT["pairserve_gpustack_version"]


def test_the_backups_name_the_new_version():
    # The scheduled backups' configuration names the GPUStack version of the dumps they take, which a restore
    # installs: upgrade.yml runs role server_backup again once the server answers the new version.
    ran("upgrade-1", "the server on GPUStack's new version")
    config = json.loads(node("node-a").check_output("cat /etc/pairserve/server-backup.json"))
    assert config["gpustack_version"] == NEXT["pairserve_gpustack_version"], config


@pytest.mark.parametrize("host", HOSTS)
def test_each_worker_runs_the_new_version(keys, host):
    ran("upgrade-1", "the workers on GPUStack's new version")
    want = NEXT["pairserve_gpustack_version"]
    # The link says which venv the unit starts; the worker's own /version says which one runs now (node-a's
    # server moved the shared link first: only a restarted worker runs the new code).
    assert node(host).run("readlink /opt/gpustack/current").stdout.strip() == want
    assert version_at(f"http://127.0.0.1:{WORKER_PORT[host]}/version") == want, \
        f"{host}'s worker process still runs another GPUStack than {want}"
    worker = [w for w in items("/v2/workers", keys["management"]) if w["name"] == host]
    assert len(worker) == 1 and worker[0]["state"] == "ready", worker
    assert worker[0].get("worker_version", "").lstrip("v") == want, worker[0].get("worker_version")


@pytest.mark.parametrize("host", HOSTS)
def test_each_worker_has_the_tool_versions_its_gpustack_checks(host):
    ran("upgrade-1", "the workers' tools")
    want = NEXT["pairserve_gpustack_version"]
    path = f"/opt/gpustack/{want}/venv/lib/python3.11/site-packages/gpustack/third_party/bin/versions.json"
    found = node(host).file(path)
    assert found.exists, f"{host}: no {path}: the tools archive was not loaded into GPUStack {want}'s venv"
    assert json.loads(found.content_string) == TOOL_VERSIONS[want]
    # Offline, a worker that wanted to download a tool would have logged it (and aborted).
    journal = node(host).run("journalctl -u gpustack-worker --no-pager -o cat").stdout
    assert "Downloading gguf-parser" not in journal and "Downloading fastfetch" not in journal


def test_every_registration_survived_the_new_version(keys, before):
    ran("upgrade-1", "the registrations after GPUStack's new version")
    key = keys["management"]

    def ids(rows, *fields):
        return {tuple(r[f] for f in fields): r["id"] for r in rows}

    for path, fields in (("/v2/clusters", ("name",)), ("/v2/workers", ("name",)), ("/v2/models", ("name",)),
                         ("/v2/model-routes", ("name",)), ("/v2/model-route-targets", ("route_id", "model_id")),
                         ("/v2/api-keys", ("name",))):
        now = ids(items(path, key), *fields)
        was = ids(before[path], *fields)
        assert now == was, f"{path}: ids before {was}, now {now}"
    assert route_weights(key) == {f"{ROUTE}-{h}": w for h, w in WEIGHTS.items()}


def test_the_api_keys_still_authenticate(keys):
    ran("upgrade-1", "the API keys after GPUStack's new version")
    status, body = call("/v1/chat/completions", keys["inference"], {
        "model": ROUTE, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Is the pair ready?"}]})
    assert status == 200, body
    assert call("/v2/models", keys["management"])[0] == 200
    assert call("/v1/chat/completions", "sk-pairserve-not-a-key",
                {"model": ROUTE, "messages": [{"role": "user", "content": "hi"}]})[0] == 401


def test_each_replica_runs_the_new_vllm(keys):
    ran("upgrade-1", "the replicas on vLLM's new pin")
    instances = {i["model_name"]: i for i in items("/v2/model-instances", keys["management"])}
    for host in HOSTS:
        inst = instances.get(f"{ROUTE}-{host}")
        assert inst and inst["state"] == "running", inst
        # vLLM itself answers on the instance's port: the new image's vLLM, not only a new registration.
        assert version_at(f"http://{inst['worker_ip']}:{inst['port']}/version") == NEXT["pairserve_vllm_version"]


def test_every_replica_runs_the_new_snapshot_with_its_weight_back(keys):
    ran("upgrade-1", "the new pins")
    running = {i["model_name"]: i for i in items("/v2/model-instances", keys["management"])}
    for host in HOSTS:
        inst = running.get(f"{ROUTE}-{host}")
        assert inst and inst["state"] == "running", inst
    assert route_weights(keys["management"]) == {f"{ROUTE}-{h}": w for h, w in WEIGHTS.items()}


def test_a_second_run_changes_nothing():
    ran("upgrade-2", "the second run")
    run = results(DIR / "upgrade-2.log")
    assert rc(DIR / "upgrade-2.rc") == 0, run.where(status="failed")
    changed = {h: r["changed"] for h, r in run.recap().items()}
    assert set(HOSTS) <= set(changed) and not any(changed.values()), run.where(changed=True)
    assert weight_changes(run) == [], "the second run drained a node"


def test_no_request_failed_while_the_upgrade_ran():
    load = load_summary(DIR)
    # The loop ran through the previous pins, the bad pin and the broken image: minutes of requests, not a handful.
    assert load["requests"] >= 50, load
    assert load["failed"] == 0, json.dumps(load, indent=1)


def test_no_request_failed_from_the_new_servers_first_answer_on():
    ran("upgrade-1", "the request loop of the new pins")
    restart = json.loads((DIR / "gpustack" / "server-restart.json").read_text())
    assert "error" not in restart, restart
    # The one gap: GPUStack's server restarting on the new version (it proxies every request). Bounded, and
    # reported by the scenario's steps (lab/route_load.py --after-server-version).
    assert restart["server_unanswered_s"] < 300, restart
    load = load_summary(DIR / "gpustack")
    # Through both nodes' worker and replica turns and the second run.
    assert load["requests"] >= 50, load
    assert load["failed"] == 0, json.dumps(load, indent=1)


def test_the_upgrade_play_printed_the_routes_gap():
    ran("upgrade-1", "the route's gap the upgrade play measured")
    log = " ".join((DIR / "upgrade-1.log").read_text(errors="replace").split())
    found = re.search(r"The route (\S+) was unavailable for ([0-9.]+) s while the GPUStack server restarted", log)
    assert found, log[-4000:]
    assert "did NOT answer again" not in log
    restart = json.loads((DIR / "gpustack" / "server-restart.json").read_text())
    # The play asks through a route (chat), the lab's loop asks /version: the route cannot answer before the server
    # does, so the play's figure is at least the loop's, less the loop's half-second polling.
    assert float(found.group(2)) >= restart["server_unanswered_s"] - 1.0, (found.group(0), restart)
    print("route gap printed by upgrade.yml: %s s (the lab loop saw the server unanswered for %s s)"
          % (found.group(2), restart["server_unanswered_s"]))


def test_the_lab_pins_files_hold_the_new_pins():
    ran("upgrade-1", "the new pins")
    pins = (INVENTORY / "group_vars" / "all" / "lab_hub.yml").read_text()
    assert HUB["next_revision"] in pins
    # next.yml's pins, with the digest the lab registry gave the next vLLM's image (steps.py use_pins)
    digest = (STATE / f"runner-{NEXT['pairserve_vllm_version']}.digest").read_text().strip()
    assert yaml.safe_load((INVENTORY / "group_vars" / "all" / "upgrade_pins.yml").read_text()) == dict(
        NEXT, pairserve_runner_image_digest=digest)
