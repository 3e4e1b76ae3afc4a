"""The replica containers GPUStack's workers start in the lab's two engines (the podman service, the Docker engine).

gpustack-runtime labels every container of a workload (the replica and its pause container) <prefix>/workload; each
lab worker has its own prefix, <node>.runtime.gpustack.ai (inventory/lab/group_vars/all/control_plane.yml), so the
lab can tell one node's replicas from the other's.
"""

from __future__ import annotations

import glob

from lab import host

ENGINES = ("podman", "docker")


def _listing(engine: str) -> list[tuple[str, str, str]]:
    """[(id, name, labels as text)] of every container of one engine; empty when the engine is not running."""
    fmt = "{{.ID}}\t{{.Names}}\t{{.Labels}}"
    if engine == "podman":
        if not host.LAB_PODMAN_CONF.exists():
            return []
        proc = host.lab_podman("ps", "-a", "--format", fmt, check=False, capture=True)
    else:
        if not host.DOCKER_SOCK.is_socket():
            return []
        proc = host.lab_docker("ps", "-a", "--format", fmt, check=False, capture=True)
    if proc.returncode != 0:
        return []
    rows = []
    for line in proc.stdout.splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3:
            rows.append((parts[0], parts[1], parts[2]))
    return rows


def workload_containers(node: str | None = None) -> list[tuple[str, str]]:
    """[(engine, id)] of the containers gpustack-runtime started (one node's, or any prefix's). podman prints labels
    as map[key:value], Docker as key=value."""
    marker = "%s.runtime.gpustack.ai/workload" % node if node else "runtime.gpustack.ai/workload"
    found = []
    for engine in ENGINES:
        sep = ":" if engine == "podman" else "="
        found += [(engine, row[0]) for row in _listing(engine) if marker + sep in row[2]]
    return found


def remove_workloads(node: str | None = None) -> None:
    """Remove the replica containers (one node's, or all), in whichever engine they run."""
    for engine, cid in workload_containers(node):
        if engine == "podman":
            host.lab_podman("rm", "-f", "--depend", "-t", "5", cid, check=False, capture=True)
        else:
            host.lab_docker("rm", "-f", cid, check=False, capture=True)


def replica_container(model: str) -> str:
    """The name of the running container GPUStack's worker started for a model's replica (not its pause or health
    container), in whichever engine its node deploys through."""
    names = []
    for engine in ENGINES:
        if engine == "podman" and host.LAB_PODMAN_CONF.exists():
            proc = host.lab_podman("ps", "--format", "{{.Names}}", check=False, capture=True)
        elif engine == "docker" and host.DOCKER_SOCK.is_socket():
            proc = host.lab_docker("ps", "--format", "{{.Names}}", check=False, capture=True)
        else:
            continue
        names += [n for n in proc.stdout.split() if model in n and "pause" not in n and "health" not in n]
    if not names:
        raise host.LabError("no running container of %s" % model)
    return names[0]


def cpu_quota(name: str, quota_us: int) -> None:
    """A container's CFS quota in microseconds per 100 ms (-1: none), in cgroup v1 as on this kind of machine
    (`podman update --cpus` sets it but cannot lift it again)."""
    proc = host.lab_podman("inspect", "--format", "{{.Id}}", name, check=False, capture=True)
    if proc.returncode != 0:
        proc = host.lab_docker("inspect", "--format", "{{.Id}}", name, check=False, capture=True)
    if proc.returncode != 0:
        if quota_us == -1:
            # Gone (its engine removed it, or GPUStack started the replica again): nothing holds a quota any more.
            host.say("lab: %s is gone: no CPU quota to lift" % name)
            return
        raise host.LabError("no container %s in the lab's engines" % name)
    cid = proc.stdout.strip()
    files = sorted(glob.glob("/sys/fs/cgroup/cpu/**/*%s*/cpu.cfs_quota_us" % cid, recursive=True))
    if not files:
        raise host.LabError("no cgroup v1 CPU quota file for %s" % name)
    with open(files[0], "w", encoding="ascii") as handle:
        handle.write("%d\n" % quota_us)
