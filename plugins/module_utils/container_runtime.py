# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container runtime a GPUStack worker starts replicas with, in gpustack-runtime's own words.

GPUStack 2.2.3's worker deploys every replica through gpustack-runtime 0.2.1, which reads its settings from the
worker's environment (gpustack_runtime/envs.py). The collection sets the ones a real node needs, from the
inventory's `pairserve_runner_runtime` and its pins, so that no site has to know them:

- which deployer: the runtime tries Docker, then Kubernetes, then Podman unless GPUSTACK_RUNTIME_DEPLOY names one
  (a podman node with a Docker-compatible socket would otherwise be driven as Docker);
- where it talks to the engine: GPUSTACK_RUNTIME_DOCKER_HOST / GPUSTACK_RUNTIME_PODMAN_HOST (defaults
  http+unix:///var/run/docker.sock and http+unix:///run/podman/podman.sock, the podman.socket unit);
- the pause and health images: every workload gets a `<name>-pause` container (and, with a teardown health check,
  an unhealthy-restart one) from floating tags (gpustack/runtime:pause, :health) pulled when missing; pinned here by
  digest, pulled beforehand (the podman deployer cannot pull at all in 0.2.1);
- GPU numbering: GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0 makes the worker number GPUs in NVML order, the
  order CUDA counts them in under CUDA_DEVICE_ORDER=PCI_BUS_ID; the replica, started privileged with every GPU of the
  node, is confined with CUDA_VISIBLE_DEVICES=<those numbers> (by default they are minor numbers, which need not be
  in PCI order);
- GPUSTACK_PROXY_TIMEOUT_SECONDS: the total time GPUStack's proxy hops (server -> worker -> replica) give one
  request (default 1800 s), one value with the HTTPS front's.

This file is the one owner of those names; the worker role, the runtime checks and inventory validation read them
from here.
"""

from __future__ import annotations

PROXY_TIMEOUT_ENV = "GPUSTACK_PROXY_TIMEOUT_SECONDS"
INDEX_ENV = "GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY"
DEPLOY_ENV = "GPUSTACK_RUNTIME_DEPLOY"

RUNTIMES = {
    "docker": {
        "deployer": "Docker",
        "host_env": "GPUSTACK_RUNTIME_DOCKER_HOST",
        "cli_env": "DOCKER_HOST",
        "socket": "/var/run/docker.sock",
        "unit": "docker.service",
        "pause_env": "GPUSTACK_RUNTIME_DOCKER_PAUSE_IMAGE",
        "health_env": "GPUSTACK_RUNTIME_DOCKER_UNHEALTHY_RESTART_IMAGE",
    },
    "podman": {
        "deployer": "Podman",
        "host_env": "GPUSTACK_RUNTIME_PODMAN_HOST",
        "cli_env": "CONTAINER_HOST",
        "socket": "/run/podman/podman.sock",
        "unit": "podman.socket",
        "pause_env": "GPUSTACK_RUNTIME_PODMAN_PAUSE_IMAGE",
        "health_env": "GPUSTACK_RUNTIME_PODMAN_UNHEALTHY_RESTART_IMAGE",
    },
}

# Every worker variable the collection sets: an inventory may not set them in pairserve_gpustack_worker_env.
OWNED_WORKER_ENV = tuple(sorted(
    {PROXY_TIMEOUT_ENV, INDEX_ENV, DEPLOY_ENV}
    | {r[key] for r in RUNTIMES.values() for key in ("host_env", "pause_env", "health_env")}
    # the runtime falls back to these for its host; set, they would point it elsewhere than the collection says
    | {r["cli_env"] for r in RUNTIMES.values()}
))
# Where each owned variable comes from, for the messages that refuse one.
OWNED_BY = {
    PROXY_TIMEOUT_ENV: "pairserve_gpustack_request_timeout",
    INDEX_ENV: "the collection (GPUs numbered in the order CUDA counts them; docs/gpu-detection.md)",
}


class ContainerRuntimeError(ValueError):
    """A runtime setting the collection cannot use; the text names the variable."""


def _runtime(runtime):
    if runtime not in RUNTIMES:
        raise ContainerRuntimeError("pairserve_runner_runtime is %r: GPUStack's worker deploys through %s"
                                    % (runtime, " or ".join(sorted(RUNTIMES))))
    return RUNTIMES[runtime]


def socket_path(host):
    """The path of a unix socket endpoint (unix://, http+unix:// or a bare absolute path), else None."""
    host = (host or "").strip()
    for prefix in ("http+unix://", "unix://"):
        if host.startswith(prefix):
            path = host[len(prefix):]
            return path if path.startswith("/") else "/" + path
    return host if host.startswith("/") else None


def endpoint(runtime, host=""):
    """How the worker, the runtime checks and the image pulls reach the engine.

    Returns a dict: `runtime`, `deployer`, `socket` (None for a TCP or SSH endpoint), `cli_host` (for the CLI's
    DOCKER_HOST / CONTAINER_HOST), `cli_env` (that variable's name), `worker_host` (gpustack-runtime's form),
    `unit` (the systemd unit that provides the default socket, which the collection enables and orders the worker
    after; None for any other endpoint: whoever set it up runs it) and `default` (the runtime's own socket).
    """
    spec = _runtime(runtime)
    host = (host or "").strip()
    path = socket_path(host) if host else spec["socket"]
    if host and path is None and "://" not in host:
        raise ContainerRuntimeError("pairserve_runner_runtime_host is %r: expected unix:///path/to.sock, "
                                    "http+unix:///path/to.sock, tcp://host:port or ssh://user@host/path" % (host,))
    is_default = path == spec["socket"]
    return {
        "runtime": runtime,
        "deployer": spec["deployer"],
        "socket": path,
        "cli_env": spec["cli_env"],
        "cli_host": ("unix://" + path) if path else host,
        "worker_host": ("http+unix://" + path) if path else host,
        "unit": spec["unit"] if is_default else None,
        "default": is_default,
    }


def image_reference(image, digest):
    """name@digest, the form the runtimes store a pinned image under (a tag beside a digest is dropped)."""
    if not image:
        return ""
    if not digest:
        return image
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return "%s@%s" % (name, digest)


def worker_env(runtime, host="", pause_image="", health_image="", request_timeout=None):
    """The gpustack-runtime settings of a worker, as strings (the systemd unit's environment)."""
    spec = _runtime(runtime)
    point = endpoint(runtime, host)
    env = {DEPLOY_ENV: spec["deployer"], spec["host_env"]: point["worker_host"], INDEX_ENV: "0"}
    if pause_image:
        env[spec["pause_env"]] = pause_image
    if health_image:
        env[spec["health_env"]] = health_image
    if request_timeout is not None:
        timeout = int(request_timeout)
        if timeout < 1:
            raise ContainerRuntimeError("pairserve_gpustack_request_timeout is %r: a number of seconds, at least 1"
                                        % (request_timeout,))
        env[PROXY_TIMEOUT_ENV] = str(timeout)
    return env


def owned_env_problems(env):
    """The keys of an inventory's worker environment that the collection sets itself, each with a reason."""
    found = []
    for key in sorted(env or {}):
        if key in OWNED_WORKER_ENV:
            source = OWNED_BY.get(key, "pairserve_runner_runtime, pairserve_runner_runtime_host and the runtime "
                                       "image pins (pairserve_runtime_pause_image, pairserve_runtime_health_image)")
            found.append("%s is set by the collection from %s; remove it from pairserve_gpustack_worker_env"
                         % (key, source))
    return found
