# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU identity: do the indexes GPUStack's worker reports name the cards gpu_pairs paired?

Replicas are pinned with gpu_selector ids `<worker>:cuda:<index>`, the index computed by gpu_pairs
(`gpustack_gpu_indexes`). GPUStack's scheduler reads the worker's own record instead (`status.gpu_devices`, from
its own detection). Where the two disagree on which UUID an index means, a replica starts on other cards than the
pair (the seed's CUDA ordering lesson, one level up), so they are compared card by card, by UUID.
"""

from __future__ import annotations

RESTART_WORKER = ("restart the worker (`systemctl restart gpustack-worker`) so that it detects the GPUs again, and "
                  "run the play again so that gpu_pairs reads the host again")


def _gpus_by_uuid(fact: dict) -> dict:
    return {gpu.get("uuid"): gpu for gpu in fact.get("gpus") or [] if gpu.get("uuid")}


def _wanted_index(pair: dict, position: int, gpu: dict):
    """The index the replica is pinned with: what gpu_pairs computed for the pair, else derived the same way."""
    indexes = pair.get("gpustack_gpu_indexes") or []
    if position < len(indexes):
        return indexes[position]
    if gpu.get("minor_number") is not None:
        return gpu["minor_number"]
    return gpu.get("index")


def _devices(worker_gpus) -> list:
    """The worker record's GPUs; takes the list itself or the whole worker record."""
    if isinstance(worker_gpus, dict):
        worker_gpus = (worker_gpus.get("status") or {}).get("gpu_devices")
    return [dev for dev in worker_gpus or [] if isinstance(dev, dict)]


def _listing(devices: list) -> str:
    return ", ".join("%s %s" % (dev.get("index"), dev.get("uuid") or "(no UUID)") for dev in devices) or "no GPU"


def problems(fact: dict, worker_gpus, host: str, worker: str | None = None) -> list:
    """Every disagreement between the `pairserve_gpu` fact and the worker's GPUs, for the GPUs of the pairs.

    Each problem is a dict: `host`, `uuid`, `pair`, `kind` (`missing`, `index`, `name` or `no_uuid`),
    `gpu_pairs_index`, `worker_index` (None where the worker has no such GPU) and `text`, one line that names the
    host, the UUID, both indexes and what to do.
    """
    worker = worker or host
    devices = _devices(worker_gpus)
    by_uuid = {dev.get("uuid"): dev for dev in devices if dev.get("uuid")}
    by_index = {}
    for dev in devices:
        by_index.setdefault(dev.get("index"), dev)
    gpus = _gpus_by_uuid(fact or {})
    found = []

    def add(kind, pair, uuid, wanted, seen, text):
        found.append({"host": host, "uuid": uuid, "pair": pair.get("index"), "kind": kind,
                      "gpu_pairs_index": wanted, "worker_index": seen, "text": "%s: %s" % (host, text)})

    if devices and not by_uuid:
        # Declared static resources carry no UUID: nothing can be compared, which must not pass as a match.
        for pair in (fact or {}).get("pairs") or []:
            for position, uuid in enumerate(pair.get("uuids") or []):
                wanted = _wanted_index(pair, position, gpus.get(uuid, {}))
                add("no_uuid", pair, uuid, wanted, None,
                    "GPUStack worker %s reports its GPUs without UUIDs (%s), so it cannot be told whether its index "
                    "%s is GPU %s of pair %s, which gpu_pairs computed as index %s. Let the worker detect its GPUs "
                    "(no gpu_devices in the resources of its configuration), then %s."
                    % (worker, _listing(devices), wanted, uuid, pair.get("index"), wanted, RESTART_WORKER))
        return found

    for pair in (fact or {}).get("pairs") or []:
        bus_ids = pair.get("bus_ids") or []
        for position, uuid in enumerate(pair.get("uuids") or []):
            gpu = gpus.get(uuid, {})
            wanted = _wanted_index(pair, position, gpu)
            bus = bus_ids[position] if position < len(bus_ids) else gpu.get("bus_id")
            card = "GPU %s (pair %s, bus %s, NVML index %s, minor number %s)" % (
                uuid, pair.get("index"), bus or "unknown", gpu.get("index", "unknown"),
                gpu.get("minor_number", "unknown"))
            there = by_index.get(wanted)
            pinned = "%s:cuda:%s" % (worker, wanted)
            dev = by_uuid.get(uuid)
            if dev is None:
                add("missing", pair, uuid, wanted, None,
                    "%s, which gpu_pairs computed as GPUStack index %s, is not among the GPUs GPUStack worker %s "
                    "reports (index and UUID: %s); the pin %s would give the replica %s. Check `nvidia-smi -L` on "
                    "the host: after a card swap or reseat, %s (set pairserve_expected_pairs to what the host has "
                    "now); if the worker runs on another host than the inventory says, fix its name "
                    "(pairserve_gpustack_worker_name). Register no replica until they agree."
                    % (card, wanted, worker, _listing(devices), pinned,
                       ("GPU %s" % there.get("uuid")) if there else "no GPU at all", RESTART_WORKER))
                continue
            seen = dev.get("index")
            if seen != wanted:
                add("index", pair, uuid, wanted, seen,
                    "%s is index %s in GPUStack worker %s's record, but gpu_pairs computed index %s for it: the pin "
                    "%s would give the replica %s instead. GPUStack numbers a GPU by its minor number "
                    "(/dev/nvidia<N>) unless GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY is off in the worker's "
                    "environment (remove it from pairserve_gpustack_worker_env); otherwise the two read the host at "
                    "different times (a card swapped, or the driver reloaded, in between): %s. Check the driver "
                    "with `nvidia-smi -q | grep -E 'Minor|UUID'`. Register no replica until they agree."
                    % (card, seen, worker, wanted, pinned,
                       ("GPU %s" % there.get("uuid")) if there else "no GPU at all", RESTART_WORKER))
            mine, theirs = gpu.get("name"), dev.get("name")
            if mine and theirs and mine != theirs:
                add("name", pair, uuid, wanted, seen,
                    "%s is a %s to gpu_pairs but a %s to GPUStack worker %s (its index %s, gpu_pairs' index %s): "
                    "the two did not read the same driver. Check the driver (`nvidia-smi`; after a driver upgrade "
                    "without a reboot, reboot), and that gpu_pairs read this host and not a recording (source %s); "
                    "then %s." % (card, mine, theirs, worker, seen, wanted, (fact or {}).get("source", "unknown"),
                                  RESTART_WORKER))
    return found
