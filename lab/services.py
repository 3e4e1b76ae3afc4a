"""The services the lab runs on its host for the nodes, each a process of its own with its PID in .lab/:

- the podman service the podman nodes deploy replicas through (/run/pairserve-lab/podman.sock);
- a Docker engine the Docker nodes deploy replicas through (/run/pairserve-lab/docker.sock), GPUStack's first road;
- the lab's container registry on 127.0.0.1:5000 (Debian's docker-registry, plain HTTP on loopback), from which the
  nodes pull the pinned images by digest as a real node pulls them from its registry;
- the local Hugging Face hub serving the tiny test model on 127.0.0.1 (lab/hub.py).

Each start is a no-op when its process still runs.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

from lab import host, pins

STATE = host.STATE
REGISTRIES_CONF = STATE / "registries.conf"
RUNC_LAB = STATE / "runc-lab"


def _runc_launcher() -> None:
    """A launcher with an absolute interpreter for the runc wrapper (podman and dockerd run runtimes with their own
    PATH). The wrapper only lifts the negative OOM score gpustack-runtime asks for, which this sandbox's root may not
    set (no CAP_SYS_RESOURCE)."""
    host.atomic_write(RUNC_LAB, '#!/bin/sh\nexec /usr/bin/python3 %s "$@"\n'
                      % (host.REPO / "lab" / "stand_ins" / "runc-no-negative-oom"), mode=0o755)


def registries_conf() -> None:
    """A registries.conf that lets podman reach the lab registry over plain HTTP (a real node's registry speaks TLS;
    nothing in the collection differs)."""
    host.atomic_write(REGISTRIES_CONF, "# Written by lab/services.py: the lab's registry on loopback speaks plain HTTP.\n"
                      'unqualified-search-registries = []\n[[registry]]\nlocation = "%s"\ninsecure = true\n'
                      % host.REGISTRY)


def start_podman_service() -> None:
    """The podman service on /run/pairserve-lab/podman.sock, with the runc wrapper as its runtime."""
    STATE.mkdir(parents=True, exist_ok=True)
    host.RUN_DIR.mkdir(parents=True, exist_ok=True)
    _runc_launcher()
    conf = host.podman_conf().read_text().replace('runtime = "runc"', 'runtime = "runc-lab"')
    host.atomic_write(host.LAB_PODMAN_CONF, conf + '[engine.runtimes]\nrunc-lab = ["%s"]\n' % RUNC_LAB)
    registries_conf()
    pidfile = STATE / "podman.pid"
    if host.alive(pidfile):
        return
    sock = host.RUN_DIR / "podman.sock"
    host.spawn(["podman", "system", "service", "--time=0", "unix://%s" % sock], STATE / "podman-service.log", pidfile,
               env=host.environ(CONTAINERS_CONF=host.LAB_PODMAN_CONF, CONTAINERS_REGISTRIES_CONF=REGISTRIES_CONF))
    host.wait_for(sock.is_socket, 10, 0.2, "podman service socket %s (see %s)" % (sock, STATE / "podman-service.log"))


def start_docker_engine() -> None:
    """A Docker engine whose socket the nodes see at /run/pairserve-lab/docker.sock. Its default runtime is `nvidia`,
    as nvidia-ctk configures it on a real node: here the lab's stand-in (stand_ins/nvidia-container-runtime), which
    reads NVIDIA_VISIBLE_DEVICES from each container's bundle and adds the recorded GPUs named there (node-b's
    recording), then runs the runc wrapper. Images live in .cache like the registry's; no bridge network (every lab
    container runs on the host's network or none)."""
    data = host.CACHE / "lab-docker"
    data.mkdir(parents=True, exist_ok=True)
    host.RUN_DIR.mkdir(parents=True, exist_ok=True)
    _runc_launcher()
    hook = STATE / "nvml-hook"
    nvidia = STATE / "nvidia-runtime"
    host.atomic_write(nvidia, "#!/bin/sh\nPAIRSERVE_LAB_NODE=node-b PAIRSERVE_LAB_GPUS=%s \\\n"
                      "PAIRSERVE_LAB_MOUNTS=%s:/usr/bin/nvidia-smi,%s:/usr/local/bin/pairserve-lab-cuda-uuids \\\n"
                      'PAIRSERVE_NEXT_RUNTIME=%s exec /usr/bin/python3 %s "$@"\n'
                      % (hook / "hosts" / "node-b.json", hook / "nvidia-smi", hook / "cuda-uuids", RUNC_LAB,
                         host.REPO / "lab" / "stand_ins" / "nvidia-container-runtime"), mode=0o755)
    host.atomic_write(STATE / "docker-daemon.json", json.dumps({
        "default-runtime": "nvidia", "runtimes": {"nvidia": {"path": str(nvidia)}},
        "iptables": False, "ip-forward": False, "ip-masq": False, "bridge": "none", "log-level": "warn"}) + "\n")
    pidfile = STATE / "dockerd.pid"
    if host.alive(pidfile):
        return
    host.spawn(["dockerd", "--config-file", STATE / "docker-daemon.json", "--data-root", data,
                "--exec-root", host.RUN_DIR / "docker", "--pidfile", STATE / "dockerd.pid.own",
                "-H", "unix://%s" % host.DOCKER_SOCK], STATE / "dockerd.log", pidfile)

    def answers():
        if not host.alive(pidfile):
            raise host.LabError("the lab's Docker engine exited; see %s" % (STATE / "dockerd.log"))
        return host.lab_docker("version", check=False, capture=True).returncode == 0
    host.wait_for(answers, 20, 0.2, "the lab's Docker engine on %s (see %s)" % (host.DOCKER_SOCK, STATE / "dockerd.log"))


def _registry_answers() -> bool:
    try:
        with urllib.request.urlopen("http://%s/v2/" % host.REGISTRY, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def registry_start() -> None:
    """The registry (once; its storage in .cache/lab-registry, so the next push finds its blobs)."""
    pidfile = STATE / "registry.pid"
    if host.alive(pidfile):
        return
    host.REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    host.atomic_write(STATE / "registry.yml", "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      "    rootdirectory: %s\nhttp:\n  addr: %s\n" % (host.REGISTRY_DIR, host.REGISTRY))
    host.spawn(["/usr/bin/docker-registry", "serve", STATE / "registry.yml"], STATE / "registry.log", pidfile)

    def answers():
        if not host.alive(pidfile):
            raise host.LabError("the lab registry exited; see %s" % (STATE / "registry.log"))
        return _registry_answers()
    host.wait_for(answers, 10, 0.1, "the lab registry on %s (see %s)" % (host.REGISTRY, STATE / "registry.log"))


def registry_stop() -> None:
    """Stop the registry and make sure nothing answers on its address any more."""
    host.stop_pid(STATE / "registry.pid")
    if _registry_answers():
        raise host.LabError("the registry still answers on %s after it was stopped" % host.REGISTRY)


def registry_push(image: str, target: str, digest_file) -> str:
    """Push a local image as <registry>/<target> and return (and keep in `digest_file`) its manifest digest."""
    registries_conf()
    host.run(["podman", "push", "--quiet", image, "docker://%s/%s" % (host.REGISTRY, target), "--digestfile",
              digest_file], env=host.environ(CONTAINERS_REGISTRIES_CONF=REGISTRIES_CONF), capture=True)
    digest = open(digest_file, encoding="ascii").read().strip()
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise host.LabError("podman push %s/%s wrote no digest to %s" % (host.REGISTRY, target, digest_file))
    host.say("lab registry: %s/%s@%s" % (host.REGISTRY, target, digest))
    return digest


def start_hub() -> None:
    """The local hub serving the tiny model, and the inventory file naming its endpoint and commit (HUB_VARS)."""
    pidfile, state = STATE / "hub.pid", STATE / "hub.json"
    if host.alive(pidfile) and state.exists() and host.HUB_VARS.exists():
        return
    host.stop_pid(pidfile)
    state.unlink(missing_ok=True)
    host.spawn([host.PYTHON, "-m", "lab.hub", "--repo", "pairserve/tiny-qwen3", "--model-dir",
                host.CACHE / "tiny-model" / "qwen3-tiny", "--state", state], STATE / "hub.log", pidfile)
    host.wait_for(state.exists, 20, 0.2, "the lab hub (see %s)" % (STATE / "hub.log"))
    hub = json.loads(state.read_text())
    host.atomic_write(host.HUB_VARS, "# Written by the lab for this lab run (git-ignored, removed by "
                      "`python -m lab down`):\n# the lab hub's endpoint and the commit sha it serves the tiny test "
                      "model at.\n" + json.dumps({
                          "pairserve_hf_endpoint": hub["endpoint"], "pairserve_checkpoint_repo": hub["repo"],
                          "pairserve_checkpoint_revision": hub["revision"],
                          "pairserve_verify_expectations_file":
                              str(host.CACHE / "tiny-model" / "qwen3-tiny" / "verification.json")}, indent=1) + "\n")


def worker_tools(gpustack_version: str) -> None:
    """The stub tools archive the lab inventory names for a GPUStack release."""
    host.run([host.PYTHON, "-m", "lab.tools_archive", gpustack_version,
              STATE / "gpustack-tools" / ("gpustack-tools-%s.tar.gz" % gpustack_version)], capture=True)


def push_pinned_images(vllm_version: str, replica_image: str) -> None:
    """The runner, pause and health images into the lab registry; their digests become the lab's pins
    (DIGEST_VARS), as a real site's pins name them. The pins must name the repositories the lab pushes to."""
    lab_pins = pins.read_fresh(host.LAB_PINS)
    want = {"pairserve_runner_image": "%s/lab/vllm-cpu:{{ pairserve_vllm_version }}" % host.REGISTRY,
            "pairserve_runtime_pause_image": "%s/lab/runtime:pause" % host.REGISTRY,
            "pairserve_runtime_health_image": "%s/lab/runtime:health" % host.REGISTRY}
    for name, value in want.items():
        if lab_pins.get(name) != value:
            raise host.LabError("%s pins %s %r; the lab pushes %r" % (host.LAB_PINS, name, lab_pins.get(name), value))
    registry_start()
    runner = registry_push(replica_image, "lab/vllm-cpu:%s" % vllm_version, STATE / "runner.digest")
    pause = registry_push("localhost/pairserve-runtime:pause", "lab/runtime:pause", STATE / "runtime-pause.digest")
    health = registry_push("localhost/pairserve-runtime:health", "lab/runtime:health",
                           STATE / "runtime-health.digest")
    host.atomic_write(host.DIGEST_VARS, "---\n# Written by the lab (git-ignored, removed by `python -m lab down`): the "
                      "digests the lab registry gave\n# the runner image %s pushed as %s/lab/vllm-cpu:%s (pins.yml),\n"
                      "# and the pause and health stand-ins pushed as %s/lab/runtime:pause and :health.\n"
                      'pairserve_runner_image_digest: "%s"\npairserve_runtime_pause_image_digest: "%s"\n'
                      'pairserve_runtime_health_image_digest: "%s"\n'
                      % (replica_image, host.REGISTRY, vllm_version, host.REGISTRY, runner, pause, health))
