# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU identity: do the indexes GPUStack's worker reports name the cards gpu_pairs paired?

Replicas are pinned with gpu_selector ids `<worker>:cuda:<index>`, the index computed by gpu_pairs
(`gpustack_gpu_indexes`). GPUStack's scheduler reads the worker's own record instead (`status.gpu_devices`, from
its own detection). Where the two disagree on which UUID an index means, a replica starts on other cards than the
pair (the seed's CUDA ordering lesson, one level up), so they are compared card by card, by UUID.

`order_problems` checks the step after that, inside the replica: GPUStack starts it privileged with every GPU of the
node and CUDA_VISIBLE_DEVICES = the GPUStack indexes, which CUDA (CUDA_DEVICE_ORDER=PCI_BUS_ID) reads as ordinals in
PCI bus-id order. A pair is served by its own cards only where each GPU's GPUStack index is that ordinal.
"""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils import nvml

# The collection's worker environment entry that makes GPUStack number GPUs by NVML index (gpu_pairs' rule).
INDEX_ENV = "GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0"

RESTART_WORKER = ("restart the worker (`systemctl restart gpustack-worker`) so that it detects the GPUs again, and "
                  "run the play again so that gpu_pairs reads the host again")


def _gpus_by_uuid(fact: dict) -> dict:
    return {gpu.get("uuid"): gpu for gpu in fact.get("gpus") or [] if gpu.get("uuid")}


def _wanted_index(pair: dict, position: int, gpu: dict):
    """The index the replica is pinned with: what gpu_pairs computed for the pair, else derived the same way."""
    indexes = pair.get("gpustack_gpu_indexes") or []
    if position < len(indexes):
        return indexes[position]
    return nvml.gpustack_index(gpu) if "index" in gpu else None


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
                    "%s would give the replica %s instead. gpu_pairs computes GPUStack's index as the NVML index, "
                    "which the worker uses only while its environment keeps the collection's %s (without it "
                    "gpustack-runtime numbers a GPU by its minor number, /dev/nvidia<N>): check with `systemctl cat "
                    "gpustack-worker` that the worker's command line sets it, and do not override it in "
                    "pairserve_gpustack_worker_env. Otherwise the two read the host at different times (a card "
                    "swapped, or the driver reloaded, in between): %s. Compare with `nvidia-smi -q | grep -E "
                    "'Bus Id|Minor|UUID'`. Register no replica until they agree."
                    % (card, seen, worker, wanted, pinned,
                       ("GPU %s" % there.get("uuid")) if there else "no GPU at all", INDEX_ENV, RESTART_WORKER))
            mine, theirs = gpu.get("name"), dev.get("name")
            if mine and theirs and mine != theirs:
                add("name", pair, uuid, wanted, seen,
                    "%s is a %s to gpu_pairs but a %s to GPUStack worker %s (its index %s, gpu_pairs' index %s): "
                    "the two did not read the same driver. Check the driver (`nvidia-smi`; after a driver upgrade "
                    "without a reboot, reboot), and that gpu_pairs read this host and not a recording (source %s); "
                    "then %s." % (card, mine, theirs, worker, seen, wanted, (fact or {}).get("source", "unknown"),
                                  RESTART_WORKER))
    return found


def _card(gpu: dict) -> str:
    return "%s (%s, bus %s)" % (gpu.get("uuid") or "(no UUID)", gpu.get("name") or "unknown model",
                                gpu.get("bus_id") or "unknown")


def order_problems(fact: dict, host: str) -> list:
    """Every GPU of a pair whose GPUStack index is not its CUDA ordinal inside the replica.

    GPUStack's vLLM replicas run privileged: the container gets ALL the node's GPUs and CUDA_VISIBLE_DEVICES = the
    GPUStack indexes of the pair (the NVML index, nvml.gpustack_index), and CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA
    read each as the rank in PCI bus-id order among all the host's GPUs (nvml.cuda_ordinals; a MIG-enabled card
    takes no rank, as CUDA does not count it as one device, so such a card before a pair's GPU is refused here).
    Where the two differ, the replica runs on other cards than its pair.

    Each problem is a dict: `host`, `uuid`, `pair`, `gpustack_index`, `cuda_ordinal` (None where the PCI order
    cannot be told) and `text`, one line naming the host, the card, both orders in full and what to do.
    """
    fact = fact or {}
    gpus = [gpu for gpu in fact.get("gpus") or [] if isinstance(gpu, dict)]
    by_uuid = _gpus_by_uuid(fact)
    ordinals = nvml.cuda_ordinals(gpus)
    by_ordinal = {ordinals[nvml.normalise_bus_id(gpu["bus_id"])]: gpu for gpu in gpus
                  if gpu.get("bus_id") and nvml.normalise_bus_id(gpu["bus_id"]) in ordinals}
    nvml_order = ", ".join("%s %s (%s)" % (nvml.gpustack_index(gpu), gpu.get("uuid") or "(no UUID)",
                                           gpu.get("bus_id") or "no bus id")
                           for gpu in sorted(gpus, key=lambda g: g.get("index", 0))) or "no GPU"
    pci_order = ", ".join("%s %s (%s)" % (rank, by_ordinal[rank].get("uuid") or "(no UUID)",
                                          by_ordinal[rank].get("bus_id")) for rank in sorted(by_ordinal)) or "unknown"
    mig = [gpu for gpu in gpus if not nvml.cuda_counted(gpu)]
    orders = ("NVML/GPUStack order (index: UUID, bus id): %s; PCI/CUDA order (CUDA ordinal under "
              "CUDA_DEVICE_ORDER=PCI_BUS_ID: UUID, bus id): %s" % (nvml_order, pci_order))
    if mig:
        orders += ("; MIG-enabled, so no CUDA ordinal: %s" % ", ".join(_card(gpu) for gpu in mig))
    found = []
    for pair in fact.get("pairs") or []:
        bus_ids = pair.get("bus_ids") or []
        for position, uuid in enumerate(pair.get("uuids") or []):
            gpu = by_uuid.get(uuid) or {"uuid": uuid, "bus_id": bus_ids[position] if position < len(bus_ids) else None}
            wanted = _wanted_index(pair, position, gpu)
            ordinal = ordinals.get(nvml.normalise_bus_id(gpu.get("bus_id") or "")) if gpu.get("bus_id") else None
            if ordinal is not None and ordinal == wanted:
                continue
            card = "GPU %s of pair %s" % (_card(gpu), pair.get("index"))
            if not gpus:
                why = "its CUDA ordinal cannot be told: the fact lists none of the host's GPUs"
            elif not ordinals:
                why = ("its CUDA ordinal cannot be told: NVML gave no PCI bus id for %s"
                       % ", ".join(_card(g) for g in gpus if nvml.cuda_counted(g) and not g.get("bus_id")))
            elif not nvml.cuda_counted(gpu):
                why = "it is MIG-enabled, and CUDA does not count a MIG-enabled card as one device"
            elif ordinal is None:
                why = "its CUDA ordinal cannot be told: bus %s is none of the host's GPUs in the fact" % gpu.get("bus_id")
            else:
                there = by_ordinal.get(wanted)
                why = ("CUDA inside the replica reads index %s as the card of PCI rank %s, %s, not this one "
                       "(its PCI rank is %s)" % (wanted, wanted, ("GPU " + _card(there)) if there else "which does not "
                                                 "exist", ordinal))
            if ordinal is None:
                advice = ("Check the driver with `nvidia-smi -q | grep -E 'Bus Id|Minor|MIG'` and run the play again, "
                          "so that gpu_pairs reads the host again")
            else:
                before = [m for m in mig if m.get("bus_id") and nvml.pci_sort_key(m["bus_id"]) < nvml.pci_sort_key(
                    gpu["bus_id"])]
                advice = ("The host's firmware or driver enumerates its GPUs out of PCI bus order%s: compare "
                          "`nvidia-smi -q | grep -E 'Bus Id|Minor'` with `nvidia-smi -L`. To serve anyway, leave the "
                          "cards whose two numbers differ out of the pairs (their UUIDs in pairserve_gpu_exclude, and "
                          "pairserve_expected_pairs lowered to match); the other cards keep their numbers. Report both "
                          "orders to the collection's maintainers"
                          % (", or a MIG-enabled card, which takes no CUDA ordinal, comes before this one in PCI order "
                             "(%s; disable MIG on it: `nvidia-smi -i <index> -mig 0`, then reset the GPU)"
                             % ", ".join(_card(m) for m in before) if before else ""))
            text = ("%s: %s is GPUStack index %s (its NVML index, how the worker numbers GPUs with the collection's "
                    "%s) but CUDA ordinal %s in the replica: GPUStack starts replicas privileged with every GPU of the "
                    "host and CUDA_VISIBLE_DEVICES set to the GPUStack indexes, and %s. %s. %s. Register no replica "
                    "until the two orders agree for every GPU of a pair."
                    % (host, card, wanted, INDEX_ENV, "unknown" if ordinal is None else ordinal, why, orders, advice))
            found.append({"host": host, "uuid": uuid, "pair": pair.get("index"), "gpustack_index": wanted,
                          "cuda_ordinal": ordinal, "text": text})
    return found
