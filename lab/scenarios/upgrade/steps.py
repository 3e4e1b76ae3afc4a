"""The upgrade scenario's steps, on a lab converged with the default pins (GPUStack 2.2.3).

It builds once what its pins need and the default lab does not (GPUStack 2.3.0's wheelhouse and worker tools, both
pins' vLLM replica images), then runs playbooks/upgrade.yml under the request loop:

1. with the previous pins (inventory/lab/upgrade/previous.yml: GPUStack 2.2.3, vLLM 0.25.1);
2. with a vLLM pin that has no runner image (refused before anything changes, reported);
3. with a runner image that cannot serve (drained, rolled out, failed verification, rolled back, reported; left out
   of the core steps);
4. with ONE pins change (inventory/lab/upgrade/next.yml: GPUStack 2.3.0, vLLM 0.27.1, and the checkpoint revision
   moved to the lab hub's next commit), under a second loop that counts from the new server's first answer on;
5. with the same pins again (changed=0).

What it keeps in .lab/upgrade/: each play's .log/.jsonl/.rc (previous, bad-pin, broken-image, upgrade-1,
upgrade-2), steps, before.json (GPUStack before the new pins), load.json (the loop through steps 1-3) and
gpustack/{load.json,server-restart.json} (the loop of steps 4-5 and the server's restart).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

from lab import host, images, pins, plays, services
from lab.api import items, read_keys
from lab.scenarios import Scenario

BOOK = "playbooks/upgrade.yml"
# What must survive the new pins: every registration's id (clusters, workers, models, routes, targets, API keys).
KEPT = ("/v2/clusters", "/v2/workers", "/v2/models", "/v2/model-routes", "/v2/model-route-targets", "/v2/api-keys")
# A vLLM pin that has no runner image: upgrade.yml must refuse it before any drain.
BAD_PIN = {"pairserve_vllm_version": "0.99.0", "pairserve_runner_image": "localhost/pairserve-vllm-cpu:0.99.0",
           "pairserve_runner_image_digest": ""}


def pins_file(step: str) -> Path:
    """The scenario's pins of one step: inventory/lab/upgrade/<previous|next>.yml."""
    return pins.UPGRADE_DIR / ("%s.yml" % step)


def pin(step: str, name: str) -> str:
    """One variable of a step's pins file (PinError naming the file when it lacks it)."""
    return pins.pin(pins_file(step), name)


def prepare_upgrade() -> None:
    """What the scenario's pins need and the default lab (CI) does not build; each built once, then kept."""
    gs_next = pin("next", "pairserve_gpustack_version")
    vllm_prev = pin("previous", "pairserve_vllm_version")
    vllm_next = pin("next", "pairserve_vllm_version")
    phases = plays.Phases()
    phases.run("GPUStack %s wheelhouse" % gs_next, host.run, ["bash", "tools/build_wheelhouse.sh", gs_next])
    phases.run("GPUStack %s worker tools" % gs_next, services.worker_tools, gs_next)
    phases.run("vLLM %s replica image" % vllm_prev, images.build_replica_image, vllm_prev)
    phases.run("vLLM %s replica image" % vllm_next, images.build_replica_image, vllm_next)


def upgrade_pins_text(source: Path, digest_file: Path) -> str:
    """The lab's upgrade_pins.yml for one step: the step's pins file without its comments, and the digest the lab
    registry gave that step's runner image."""
    lines = Path(source).read_text(encoding="utf-8").splitlines(True)
    kept = [line if line.endswith("\n") else line + "\n" for line in lines if not line.startswith("#")]
    digest = Path(digest_file).read_text(encoding="utf-8").strip()
    try:
        shown = Path(source).resolve().relative_to(host.REPO)
    except ValueError:
        shown = Path(source)
    return ("# Written by `python -m lab scenario upgrade` from %s (git-ignored, removed by\n"
            "# `python -m lab down`); loaded after pins.yml, so these pins are the lab's now.\n"
            "%spairserve_runner_image_digest: \"%s\"\n" % (shown, "".join(kept), digest))


def use_pins(step: str) -> None:
    """The scenario's pins file of `step` becomes the lab's (host.UPGRADE_PINS), as a user edits pins.yml.

    The runner image of its vLLM comes from the lab registry by digest, as the default lab's does (pins.yml names
    the repository from the vLLM version; the digest is known once the image is pushed): both nodes pull it,
    node-b through Docker, which has no podman image store to find a localhost/ image in."""
    vllm = pin(step, "pairserve_vllm_version")
    digest_file = host.STATE / ("runner-%s.digest" % vllm)
    services.registry_start()
    services.registry_push(images.replica_image(vllm), "lab/vllm-cpu:%s" % vllm, digest_file)
    host.atomic_write(host.UPGRADE_PINS, upgrade_pins_text(pins_file(step), digest_file))


def set_pin(name: str, value: str) -> None:
    """Change one variable of the lab hub's generated inventory file (host.HUB_VARS: '#' comment lines, then a JSON
    body), atomically; its comments stay as they were."""
    path = Path(host.HUB_VARS)
    lines = path.read_text(encoding="utf-8").splitlines(True)
    header = "".join(line for line in lines if line.startswith("#"))
    data = json.loads("".join(line for line in lines if not line.startswith("#")))
    data[name] = value
    host.atomic_write(path, header + json.dumps(data, indent=1) + "\n")


def server_version() -> str:
    """The version GPUStack's server answers on /version, without the leading v; empty when it answers none."""
    try:
        with urllib.request.urlopen(host.SERVER_URL + "/version", timeout=5) as resp:
            return json.load(resp)["version"].lstrip("v")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""


def snapshot_gpustack(path: Path) -> dict:
    """Write to `path` the ids of what the upgrade must keep (KEPT), what answers on each replica's port (vLLM's
    own /version) and the version the server answers; print the versions."""
    try:
        key = read_keys()["management"]
        snap: dict = {api_path: items(api_path, key) for api_path in KEPT}
        snap["replica_vllm"] = {}
        for inst in items("/v2/model-instances", key):
            try:
                with urllib.request.urlopen("http://%s:%d/version" % (inst["worker_ip"], inst["port"]),
                                            timeout=10) as resp:
                    snap["replica_vllm"][inst["model_name"]] = json.load(resp)["version"]
            except (OSError, ValueError, KeyError) as err:
                snap["replica_vllm"][inst["model_name"]] = "error: %s" % err
        with urllib.request.urlopen(host.SERVER_URL + "/version", timeout=10) as resp:
            snap["server_version"] = json.load(resp)["version"]
    except (AssertionError, OSError, ValueError, KeyError, subprocess.CalledProcessError) as err:
        raise host.LabError("lab upgrade: GPUStack's state before the new pins could not be read: %s" % err) from err
    Path(path).write_text(json.dumps(snap, indent=1), encoding="utf-8")
    host.say("lab upgrade: GPUStack %s, replicas on vLLM %s (%s)"
             % (snap["server_version"], snap["replica_vllm"], path))
    return snap


def podman_image_to_docker(image: str) -> None:
    """A local image of the lab's podman copied into the Docker engine (node-b deploys through Docker):
    `podman save IMAGE | docker load`, each side checked."""
    save_argv = ["podman", "save", image]
    load_argv = ["docker", "-H", "unix://%s" % host.DOCKER_SOCK, "load"]
    with subprocess.Popen(save_argv, cwd=host.REPO, env=host.environ(CONTAINERS_CONF=host.LAB_PODMAN_CONF),
                          stdout=subprocess.PIPE) as save:
        with subprocess.Popen(load_argv, cwd=host.REPO, env=host.environ(), stdin=save.stdout,
                              stdout=subprocess.DEVNULL) as load:
            # Only `docker load` reads the pipe now: if it stops early, `podman save` gets SIGPIPE, not a hang.
            save.stdout.close()
            load_rc = load.wait()
        save_rc = save.wait()
    if save_rc != 0 or load_rc != 0:
        raise host.LabError("podman save %s | docker load: exit %d | %d" % (image, save_rc, load_rc))


def broken_image_step(scenario: Scenario) -> None:
    """upgrade.yml with a runner image that tells the pinned vLLM and cannot serve: the lab's replica image whose
    `vllm serve` exits at once (an image without vLLM is refused before the drain by the runner image's version
    check). The replica is drained, registered with it, rolled out, fails verification, and is put back exactly as
    it was. A local image, by name (no digest: the previous pins' digest in upgrade_pins.yml is the registry
    image's); in the lab's podman and in the Docker engine node-b deploys through, removed from both afterwards."""
    broken = images.broken_runner_image(images.replica_image(pin("previous", "pairserve_vllm_version")),
                                        host.STATE / "broken-image")
    try:
        podman_image_to_docker(broken)
        scenario.say("a runner image that cannot serve (expected: drained, verified, rolled back)")
        scenario.play("broken-image", BOOK, "-e", json.dumps({
            "pairserve_runner_image": broken, "pairserve_runner_image_digest": "",
            "pairserve_verify_wait_timeout": 150}))
    finally:
        host.lab_podman("rmi", broken, check=False, capture=True)
        host.lab_docker("rmi", broken, check=False, capture=True)


def run(scenario: Scenario) -> None:
    """The scenario's steps (module docstring); LabError when a step other than a play failed."""
    try:
        next_revision = json.loads((host.STATE / "hub.json").read_text(encoding="utf-8"))["next_revision"]
    except (OSError, ValueError, KeyError) as err:
        raise host.LabError("lab upgrade: no next commit of the lab hub in %s: %s" % (host.STATE / "hub.json", err)) \
            from err
    gs_prev = pin("previous", "pairserve_gpustack_version")
    vllm_prev = pin("previous", "pairserve_vllm_version")
    gs_next = pin("next", "pairserve_gpustack_version")
    vllm_next = pin("next", "pairserve_vllm_version")
    running = server_version()
    # The scenario starts from the previous pins; a lab that already runs a newer GPUStack (a second run) has a
    # migrated database that the previous version must not be started on.
    if running != gs_prev:
        raise host.LabError("lab upgrade: GPUStack answers '%s' on %s, not %s: the scenario starts from a lab "
                            "converged with the default pins. Run python -m lab down && python -m lab up first."
                            % (running or "nothing", host.SERVER_URL, gs_prev))
    scenario.prepare()
    scenario.say("what the scenario's pins need (built once, not part of `make lab`)")
    prepare_upgrade()

    load = scenario.load().start()
    try:
        scenario.say("the previous pins (inventory/lab/upgrade/previous.yml: GPUStack %s, vLLM %s)"
                     % (gs_prev, vllm_prev))
        use_pins("previous")
        if scenario.play("previous", BOOK) != 0:
            raise host.LabError("lab upgrade: the lab did not reach the previous pins; see %s"
                                % scenario.path("previous.log"))
        scenario.say("a vLLM pin without a runner image (expected to fail before anything changes)")
        scenario.play("bad-pin", BOOK, "-e", json.dumps(BAD_PIN))
        scenario.record_steps()
        if scenario.steps == "all":
            broken_image_step(scenario)
        snapshot_gpustack(scenario.path("before.json"))
    except host.LabError:
        load.stop()
        raise
    scenario.say("the route under load while the previous pins, the bad pin and the broken image ran")
    load.stop()

    scenario.say("the new pins (inventory/lab/upgrade/next.yml: GPUStack %s, vLLM %s) and "
                 "pairserve_checkpoint_revision -> %s (the hub's next commit)" % (gs_next, vllm_next, next_revision))
    use_pins("next")
    set_pin("pairserve_checkpoint_revision", next_revision)
    # The loop pauses while the server restarts on the new version (the route's one unavoidable gap: every request
    # goes through GPUStack's server) and runs again from its first answer on, through the workers' and replicas'
    # turns.
    load = scenario.load("gpustack").start_after_server_restart(gs_next)
    scenario.play("upgrade-1", BOOK)
    scenario.say("the same pins again (expected changed=0)")
    scenario.play("upgrade-2", BOOK)
    scenario.say("the route under load from the server's restart on")
    load.stop()
    restart = scenario.path("gpustack") / "server-restart.json"
    if restart.exists():
        host.say(restart.read_text(encoding="utf-8").rstrip("\n"))
