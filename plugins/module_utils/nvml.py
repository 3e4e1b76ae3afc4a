# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVML inventory of a GPU node and its grouping into tensor-parallel pairs.

One place for what the collection knows about GPUs: `inventory()` reads every device through the real
nvidia-ml-py (or a recorded host, see nvml_replay), `plan()` groups them, `facts()` gives the
`pairserve_gpu` fact that the gpu_pairs module returns and the roles consume.
"""

from __future__ import annotations

import itertools
import os
import re
import sys

try:
    import pynvml
    HAS_PYNVML = True
except ImportError:
    pynvml = None
    HAS_PYNVML = False

from ansible_collections.pairserve.llm.plugins.module_utils import nvml_replay

MIB = 1 << 20

# nvmlDeviceArchitecture_t -> name. Unknown values fall back to the compute capability (ARCH_BY_CC).
ARCH_BY_NVML = {2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere", 8: "ada",
                9: "hopper", 10: "blackwell", 13: "rubin"}

# The first driver branch NVIDIA's release notes name for each architecture. A GPU on an older driver may
# still enumerate but cannot run the CUDA 12.8+ builds vLLM ships (RTX 50 / Blackwell need R570).
DEFAULT_MIN_DRIVER = {"blackwell": "570", "hopper": "525", "ada": "525", "ampere": "450", "turing": "418",
                      "volta": "384"}

# nvmlGpuTopologyLevel_t: how far apart two GPUs are on the PCIe tree (lower is nearer).
TOPOLOGY = {0: "internal", 10: "single_switch", 20: "multiple_switches", 30: "host_bridge", 40: "numa_node",
            50: "system"}

# nvmlGpuP2PStatus_t
P2P_STATUS = {0: "ok", 1: "chipset_not_supported", 2: "gpu_not_supported", 3: "ioh_topology_not_supported",
              4: "disabled_by_regkey", 5: "not_supported", 6: "unknown"}

# nvmlGpuP2PCapsIndex_t as plain ints. nvidia-ml-py 13.x defines NVML_P2P_CAPS_INDEX_READ as `0,` (a tuple,
# a stray trailing comma): handing it to nvmlDeviceGetP2PStatus raises ctypes.ArgumentError, so never use
# the binding's constants here.
P2P_CAPS_INDEX = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3, "prop": 4}

# Pairing preference: the lower, the better.
LINK_RANK = {"nvlink": 0, "p2p": 1, "pcie": 2}

NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS in nvidia-ml-py 13.x

NO_DRIVER_HINT = ("install the NVIDIA driver for this GPU (e.g. Debian's nvidia-driver or NVIDIA's .run/CUDA "
                  "repository package) and reboot so the kernel module loads, then check `nvidia-smi`; on a "
                  "machine without GPUs set PAIRSERVE_NVML_REPLAY to a recording (tests/fixtures/nvml/*.json) "
                  "to replay a recorded host")


class GpuInventoryError(Exception):
    """A problem the user must act on; the message says what and how. `fact` is what was read, if anything."""

    def __init__(self, message: str, fact: dict | None = None):
        super().__init__(message)
        self.fact = fact


def arch_from_cc(major: int, minor: int) -> str:
    """Architecture name from the CUDA compute capability (when NVML does not know the chip)."""
    if major in (10, 11, 12):
        return "blackwell"
    if major == 9:
        return "hopper"
    if major == 8:
        return "ada" if minor >= 9 else "ampere"
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    return {6: "pascal", 5: "maxwell", 3: "kepler"}.get(major, "unknown")


def fp4_path(major: int, minor: int) -> str:
    """How vLLM runs an NVFP4 checkpoint on this compute capability.

    cc >= 10.0 (Blackwell, incl. GeForce 12.0) has FP4 tensor cores: native kernels. cc >= 8.0 (Ampere, Ada,
    Hopper) runs FP4 weights through Marlin's weight-only path (dequantised to 16-bit in the kernel); the
    4070 Ti SUPER pair of the seed serves this way. Below 8.0 Marlin does not run.
    """
    if (major, minor) >= (10, 0):
        return "native"
    if (major, minor) >= (8, 0):
        return "marlin"
    return "unsupported"


def version_tuple(text: str) -> tuple:
    return tuple(int(part) for part in re.findall(r"\d+", str(text)))


def normalise_bus_id(text: str) -> str:
    """'0000:01:00.0', '00000000:01:00.0', '01:00.0' -> '00000000:01:00.0' (NVML's busId form)."""
    match = re.fullmatch(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])", text.strip())
    if not match:
        return text.strip().upper()
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{function}"


def _error_name(exc) -> str:
    return type(exc).__name__.replace("NVMLError_", "")


def _lost_message(gpu: dict, exc) -> str:
    where = gpu.get("bus_id") or f"NVML index {gpu['index']}"
    uuid = gpu.get("uuid") or "UUID unreadable"
    return (f"GPU {where} ({uuid}) answers NVML with {_error_name(exc)}: it has fallen off the bus. "
            "Check `dmesg` for NVRM Xid 79/48/62 lines, then reboot the host; if it comes back lost, power it "
            "off and reseat the card and its power cables. To run on the remaining GPUs meanwhile, add its "
            "UUID or bus id to `exclude` (and lower `expected_pairs`).")


def _is_lost(exc) -> bool:
    return _error_name(exc) in ("GpuIsLost", "GpuRequiresReset", "ResetRequired")


class Nvml:
    """A session with NVML (real, or a replayed recording when PAIRSERVE_NVML_REPLAY is set)."""

    def __init__(self, environ=None):
        environ = os.environ if environ is None else environ
        self.replay_path = environ.get(nvml_replay.ENV_VAR) or None
        self.source = f"replay:{self.replay_path}" if self.replay_path else "nvml"

    def __enter__(self):
        if not HAS_PYNVML:
            raise GpuInventoryError(
                "the Python package nvidia-ml-py (module `pynvml`) is not importable by "
                f"{sys.executable}: run the pairserve.llm.node_venv role first and run this module with "
                "`ansible_python_interpreter: \"{{ pairserve_node_python }}\"`, or `pip install nvidia-ml-py`")
        if self.replay_path:
            try:
                nvml_replay.install(self.replay_path)
            except nvml_replay.RecordingError as exc:
                raise GpuInventoryError(str(exc)) from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            name = _error_name(exc)
            if name in ("LibraryNotFound", "DriverNotLoaded", "NoPermission", "LibRmVersionMismatch"):
                what = {"LibraryNotFound": "libnvidia-ml.so.1 was not found",
                        "DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
                        "NoPermission": "this user may not open /dev/nvidia*",
                        "LibRmVersionMismatch": "the NVML library and the loaded kernel module differ in version "
                                                "(a driver upgrade without a reboot)"}[name]
                raise GpuInventoryError(f"NVML could not start ({source_note(self.source)}NVMLError_{name}): "
                                        f"{what}. To fix: {NO_DRIVER_HINT}.") from exc
            raise GpuInventoryError(f"NVML could not start: NVMLError_{name} ({exc})") from exc
        return self

    def __exit__(self, *exc_info):
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
        if self.replay_path:
            nvml_replay.uninstall()
        return False

    # ---------------------------------------------------------------------------------------------
    @staticmethod
    def _optional(call, *args):
        """Value, or None for answers NVML may lawfully refuse (NotSupported, NoPermission ...)."""
        try:
            return call(*args)
        except pynvml.NVMLError as exc:
            if _is_lost(exc):
                raise
            return None

    def system(self) -> dict:
        cuda = self._optional(pynvml.nvmlSystemGetCudaDriverVersion)
        return {
            "driver_version": pynvml.nvmlSystemGetDriverVersion(),
            "nvml_version": self._optional(pynvml.nvmlSystemGetNVMLVersion),
            "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
        }

    def _nvlinks(self, handle) -> int:
        active = 0
        for link in range(NVLINK_MAX_LINKS):
            try:
                active += 1 if pynvml.nvmlDeviceGetNvLinkState(handle, link) else 0
            except pynvml.NVMLError as exc:
                if _is_lost(exc):
                    raise
                break  # NotSupported (GeForce) or InvalidArgument past the last link
        return active

    def gpus(self) -> list:
        """Every device in NVML order, with the handles kept for the pair queries."""
        result = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpu = {"index": index, "uuid": None, "bus_id": None}
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                gpu["uuid"] = self._optional(pynvml.nvmlDeviceGetUUID, handle)
                pci = self._optional(pynvml.nvmlDeviceGetPciInfo, handle)
                gpu["bus_id"] = normalise_bus_id(pci.busId) if pci is not None else None
                # /dev/nvidia<minor>: informative only. gpustack-runtime numbers GPUs by it unless
                # GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0, which the collection sets (see gpustack_index).
                gpu["minor_number"] = self._optional(pynvml.nvmlDeviceGetMinorNumber, handle)
                # (current, pending); None where MIG does not exist (GeForce: NotSupported).
                mig = self._optional(pynvml.nvmlDeviceGetMigMode, handle)
                gpu["mig_enabled"] = bool(mig[0]) if mig is not None else False
                gpu.update(self._describe(handle))
            except pynvml.NVMLError as exc:
                if _is_lost(exc):
                    raise GpuInventoryError(_lost_message(gpu, exc)) from exc
                raise GpuInventoryError(f"NVML refused to describe GPU {gpu['bus_id'] or index}: "
                                        f"NVMLError_{_error_name(exc)}") from exc
            gpu["_handle"] = handle
            result.append(gpu)
        return result

    def _describe(self, handle) -> dict:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        arch = ARCH_BY_NVML.get(self._optional(pynvml.nvmlDeviceGetArchitecture, handle)) or arch_from_cc(major, minor)
        power = self._optional(pynvml.nvmlDeviceGetPowerUsage, handle)
        limit = self._optional(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        persistence = self._optional(pynvml.nvmlDeviceGetPersistenceMode, handle)
        return {
            "name": pynvml.nvmlDeviceGetName(handle),
            "memory_total_bytes": memory.total,
            "memory_total_mib": memory.total // MIB,
            "compute_capability": f"{major}.{minor}",
            "cc": (major, minor),
            "architecture": arch,
            "power_draw_w": round(power / 1000.0, 1) if power is not None else None,
            "power_limit_w": round(limit / 1000.0, 1) if limit is not None else None,
            "persistence_mode": bool(persistence) if persistence is not None else None,
            # Max values: GeForce cards drop to PCIe Gen1 at idle, the current link says nothing.
            "pcie_max_gen": self._optional(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            "pcie_max_width": self._optional(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
            "nvlink_active_links": self._nvlinks(handle),
            "numa_node": self._optional(pynvml.nvmlDeviceGetNumaNodeId, handle),
        }

    def link(self, first: dict, second: dict) -> dict:
        """How two GPUs talk: P2P status per capability and the common PCIe ancestor."""
        p2p = {}
        for name, cap in P2P_CAPS_INDEX.items():
            try:
                # Plain int on purpose: see P2P_CAPS_INDEX.
                p2p[name] = P2P_STATUS.get(pynvml.nvmlDeviceGetP2PStatus(first["_handle"], second["_handle"], cap),
                                           "unknown")
            except pynvml.NVMLError as exc:
                if _is_lost(exc):
                    raise GpuInventoryError(_lost_message(first, exc)) from exc
                p2p[name] = "error_" + _error_name(exc).lower()
        # NVML's common ancestor does not see NVLink (an NVLinked H200 pair reports host_bridge): read
        # NVLink from the P2P NVLINK capability, the PCIe distance from the ancestor.
        try:
            level = self._optional(pynvml.nvmlDeviceGetTopologyCommonAncestor, first["_handle"], second["_handle"])
        except pynvml.NVMLError as exc:  # only a lost GPU gets here
            raise GpuInventoryError(_lost_message(first, exc)) from exc
        if p2p["nvlink"] == "ok":
            kind = "nvlink"
        elif p2p["read"] == "ok" and p2p["write"] == "ok":
            kind = "p2p"
        else:
            kind = "pcie"
        return {
            "uuids": [first["uuid"], second["uuid"]],
            "bus_ids": [first["bus_id"], second["bus_id"]],
            "nvml_indices": [first["index"], second["index"]],
            "link": kind,
            "topology": TOPOLOGY.get(level, "unknown"),
            "topology_level": level,
            "p2p": p2p,
        }


def source_note(source: str) -> str:
    return f"{source}: " if source != "nvml" else ""


def _group_score(members: tuple, links: dict) -> tuple:
    """Worst link inside the group first, then nearest PCIe ancestor, then bus ids (determinism)."""
    pair_links = [links[(a["bus_id"], b["bus_id"])] for a, b in itertools.combinations(members, 2)]
    worst_kind = max((LINK_RANK[item["link"]] for item in pair_links), default=0)
    worst_level = max(((item["topology_level"] if item["topology_level"] is not None else 99) for item in pair_links),
                      default=0)
    return (worst_kind, worst_level, tuple(m["bus_id"] for m in members))


def _model_key(gpu: dict) -> tuple:
    return (gpu["name"], gpu["memory_total_mib"])


def gpustack_index(gpu: dict) -> int:
    """The index GPUStack's worker gives a GPU, which its gpu_selector ids name: the NVML enumeration index.

    gpustack-runtime 0.2.1 (detector/nvidia.py) enumerates in NVML order and keeps that index while
    GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY is off; on (its default) it takes the minor number
    (/dev/nvidia<N>) instead, which need not follow PCI order. The collection sets the variable to 0 in every
    worker's environment, so the worker's numbering is NVML's; `cuda_ordinals` says where a replica then lands.
    """
    return gpu["index"]


def pci_sort_key(bus_id: str) -> tuple:
    """(domain, bus, device, function) of a PCI bus id, as numbers: the order CUDA_DEVICE_ORDER=PCI_BUS_ID uses."""
    match = re.fullmatch(r"([0-9A-F]{8}):([0-9A-F]{2}):([0-9A-F]{2})\.([0-7])", normalise_bus_id(str(bus_id)))
    if not match:
        raise ValueError(f"{bus_id!r} is no PCI bus id")
    return tuple(int(part, 16) for part in match.groups())


def cuda_counted(gpu: dict) -> bool:
    """Whether CUDA counts the GPU as one device. A MIG-enabled card is not one CUDA device (CUDA sees its MIG
    instances, if any, not the card), so it takes no ordinal; gpu_pairs leaves it out of the pairs anyway."""
    return not gpu.get("mig_enabled")


def cuda_ordinals(gpus: list) -> dict:
    """{bus id: CUDA ordinal} for every GPU CUDA counts: its rank in PCI bus-id order among ALL the host's GPUs
    (MIG-enabled cards aside, see cuda_counted).

    GPUStack starts its vLLM replicas privileged: the container gets every GPU of the node and
    CUDA_VISIBLE_DEVICES = the GPUStack indexes of the selected ones, and the replica has
    CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA reads each index as this ordinal. Empty where a counted GPU has no bus id
    (the order cannot be told then).
    """
    counted = [g for g in gpus if cuda_counted(g)]
    if any(not g.get("bus_id") for g in counted):
        return {}
    ranked = sorted(counted, key=lambda g: pci_sort_key(g["bus_id"]))
    return {normalise_bus_id(g["bus_id"]): rank for rank, g in enumerate(ranked)}


# The rules that leave a GPU out of every pair: what each is called in a message, and the inventory variable that
# sets it (None: the card's own state).
LEFTOVER_RULES = {
    "exclude": ("the exclude option", "pairserve_gpu_exclude"),
    "mig": ("MIG mode", None),
    "model": ("one model and memory size per pair", "pairserve_gpu_allow_mixed"),
    "partner": ("whole pairs only", None),
}


def _left(gpu: dict, rule: str, reason: str) -> dict:
    return {"uuid": gpu["uuid"], "bus_id": gpu["bus_id"], "name": gpu.get("name"), "rule": rule, "reason": reason}


def no_pairs_reason(gpus: list, leftover: list, group_size: int = 2):
    """Why a host has no pair at all, naming which rule removed which GPU; None when it has one. The preflight role
    fails with this text (before anything is installed), instead of a bare "no pair found"."""
    if not gpus:
        return ("NVML sees no GPU on this host (the driver answers but lists no device): check that the cards are "
                "seated and powered and `nvidia-smi -L` lists them")
    by_rule = {}
    for item in leftover:
        by_rule.setdefault(item.get("rule") or "partner", []).append(item)
    parts = []
    for rule, items in by_rule.items():
        label, variable = LEFTOVER_RULES.get(rule, (rule, None))
        cards = "; ".join("%s (%s, %s): %s" % (i["bus_id"], i.get("name") or "?", i["uuid"], i["reason"]) for i in items)
        parts.append("%s%s removed %d: %s" % (label, " (%s)" % variable if variable else "", len(items), cards))
    return ("no group of %d is left: NVML sees %d GPU(s), and the pairing rules removed every one. %s"
            % (group_size, len(gpus), " | ".join(parts)))


def plan(gpus: list, links: dict, *, group_size: int = 2, allow_mixed: bool = False, exclude=()) -> tuple:
    """Group GPUs into tensor-parallel groups. Returns (groups as lists of gpu dicts, leftover list).

    Only GPUs of one model and memory size form a group unless allow_mixed: TP shards the model evenly,
    so the smaller or slower card sets the pace and the memory of the whole group. Inside a class the best
    linked group wins first (NVLink > P2P > PCIe, then the nearest common PCIe ancestor), ties broken by
    PCI bus id so the result does not depend on enumeration order.
    """
    wanted = {normalise_bus_id(item) if ":" in item else item for item in exclude}
    leftover, candidates = [], []
    for gpu in sorted(gpus, key=lambda g: g["bus_id"]):
        if gpu["uuid"] in wanted or gpu["bus_id"] in wanted:
            leftover.append(_left(gpu, "exclude", "excluded by the exclude option"))
        elif gpu.get("mig_enabled"):
            # A MIG-enabled card is split into instances: neither the whole card nor its memory is a TP rank's.
            leftover.append(_left(gpu, "mig", "MIG mode is enabled: the card is split into MIG instances, not one GPU "
                                              "a replica can use; disable it (nvidia-smi -i %s -mig 0, then reset the "
                                              "GPU) or list it in exclude" % gpu.get("index", "<index>")))
        else:
            candidates.append(gpu)

    classes: dict = {}
    for gpu in candidates:
        classes.setdefault(("any",) if allow_mixed else _model_key(gpu), []).append(gpu)

    groups = []
    for members in classes.values():
        free = list(members)
        while len(free) >= group_size:
            best = min(itertools.combinations(free, group_size), key=lambda c: _group_score(c, links))
            groups.append(sorted(best, key=lambda g: g["bus_id"]))
            free = [g for g in free if g not in best]
        for gpu in free:
            if allow_mixed or len(classes) == 1:
                rule = "partner"
                reason = (f"no partner: {len(members)} usable GPU(s) do not divide into groups of {group_size}; "
                          "the best-linked GPUs were grouped first")
            else:
                rule = "model"
                others = sorted({f"{k[0]} ({k[1]} MiB)" for k in classes if k != _model_key(gpu)})
                reason = (f"no partner of the same model and memory ({gpu['name']}, {gpu['memory_total_mib']} MiB; "
                          f"group_size {group_size}); other GPUs here: {', '.join(others)}. Set allow_mixed: true to "
                          "pair different models (the slower card then paces the replica)")
            leftover.append(_left(gpu, rule, reason))
    groups.sort(key=lambda group: group[0]["bus_id"])
    leftover.sort(key=lambda item: item["bus_id"] or "")
    return groups, leftover


def describe_group(number: int, group: list, links: dict, ordinals: dict | None = None) -> dict:
    """One pair of the fact; `ordinals` is cuda_ordinals() over all the host's GPUs."""
    ordinals = ordinals or {}
    ccs = [g["cc"] for g in group]
    weakest = min(group, key=lambda g: g["cc"])
    pair_links = [links[(a["bus_id"], b["bus_id"])] for a, b in itertools.combinations(group, 2)]
    worst = max(pair_links, key=lambda item: (LINK_RANK[item["link"]], item["topology_level"] or 0),
                default=None)
    names = sorted({g["name"] for g in group})
    powers = [g["power_draw_w"] for g in group]
    return {
        "index": number,
        "uuids": [g["uuid"] for g in group],
        "bus_ids": [g["bus_id"] for g in group],
        "nvml_indices": [g["index"] for g in group],
        # UUIDs, never indices: CUDA numbers devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so
        # on a mixed host "0,1" in CUDA order is not NVML's 0,1. A UUID means the same card everywhere.
        "cuda_visible_devices": ",".join(g["uuid"] for g in group),
        # GPUStack's gpu_selector ids are "<worker>:cuda:<index>" with the index its worker reports: the NVML index,
        # as the collection sets GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0 for the worker (on, its default,
        # gpustack-runtime 0.2.1 would take the minor number, which need not follow PCI order; see gpustack_index).
        "gpustack_gpu_indexes": [gpustack_index(g) for g in group],
        # Where CUDA inside the privileged replica reads those indexes (PCI bus-id rank among all the host's GPUs):
        # the pair is served by its own cards only where the two lists are equal (gpu_identity.order_problems).
        "cuda_ordinals": [ordinals.get(normalise_bus_id(g["bus_id"])) if g.get("bus_id") else None for g in group],
        "name": " + ".join(names),
        "mixed": len(names) > 1 or len({g["memory_total_mib"] for g in group}) > 1,
        "memory_total_mib": min(g["memory_total_mib"] for g in group),
        "compute_capability": weakest["compute_capability"],
        "architecture": weakest["architecture"],
        "fp4_path": fp4_path(*min(ccs)),
        "link": worst["link"] if worst else "none",
        "p2p_read": worst["p2p"]["read"] if worst else "none",
        "topology": worst["topology"] if worst else "none",
        "idle_power_w": round(sum(powers), 1) if all(p is not None for p in powers) else None,
        **pair_topology(number, group, worst),
    }


# NVML's PCIe distance at which a path leaves one CPU socket (nvmlGpuTopologyLevel_t SYSTEM: across the SMP
# interconnect between NUMA nodes).
CROSS_SOCKET_LEVEL = 50


def pair_topology(number: int, group: list, worst) -> dict:
    """Where the pair's cards hang: their NUMA nodes (null where NVML does not say: GeForce, many VMs), whether the
    pair spans NUMA nodes or CPU sockets (different NUMA nodes, or a PCIe path at NVML's SYSTEM level), and a warning
    when it does without a direct peer-to-peer path (NVLink or PCIe P2P)."""
    numa = [g.get("numa_node") for g in group]
    known = [n for n in numa if n is not None]
    level = worst["topology_level"] if worst else None
    if len(set(known)) > 1 or level == CROSS_SOCKET_LEVEL:
        spans = True
    elif len(known) == len(numa) or (level is not None and level < CROSS_SOCKET_LEVEL):
        spans = False
    else:
        spans = None
    direct = bool(worst) and worst["link"] in ("nvlink", "p2p")
    warning = None
    if spans and not direct:
        where = ("NUMA nodes %s" % ", ".join(str(n) for n in numa)) if len(set(known)) > 1 else \
            "a PCIe path across the CPU sockets (NVML topology: system)"
        warning = ("pair %d (%s) spans CPU sockets: %s, and no direct peer-to-peer path (link %s, P2P read %s). "
                   "Every tensor-parallel all-reduce (two per layer for every token) is staged through host memory "
                   "and crosses the sockets' interconnect, so decode and prefill at TP=2 run slower than on a pair "
                   "under one socket, and the seed's figures do not apply; measure it with playbooks/bench.yml, or "
                   "pair cards of one socket (pairserve_gpu_exclude)"
                   % (number, " + ".join(g["bus_id"] for g in group), where, worst["link"] if worst else "none",
                      worst["p2p"]["read"] if worst else "none"))
    return {"numa_nodes": numa, "spans_sockets": spans, "topology_warning": warning}


def check_drivers(system: dict, gpus: list, min_driver: dict) -> None:
    driver = version_tuple(system["driver_version"])
    for arch in sorted({g["architecture"] for g in gpus}):
        need = min_driver.get(arch)
        if need and driver < version_tuple(need):
            names = sorted({g["name"] for g in gpus if g["architecture"] == arch})
            raise GpuInventoryError(
                f"driver {system['driver_version']} is too old for {arch} GPUs ({', '.join(names)}): "
                f"{arch} needs driver >= {need}. Install a newer NVIDIA driver branch and reboot, or, if you "
                f"know this driver works, lower min_driver.{arch}.")


def gather(environ=None, *, group_size=2, allow_mixed=False, exclude=(), expected_pairs=None, min_driver=None) -> dict:
    """The whole `pairserve_gpu` fact. Raises GpuInventoryError with an actionable message."""
    if group_size < 1:
        raise GpuInventoryError(f"group_size is {group_size}: it must be 1 or more (2 for the TP=2 replicas)")
    try:
        return _gather(environ, group_size, allow_mixed, exclude, expected_pairs, min_driver)
    except GpuInventoryError:
        raise
    except pynvml.NVMLError as exc:
        raise GpuInventoryError(f"NVML failed unexpectedly: NVMLError_{_error_name(exc)} ({exc}); run "
                                "`nvidia-smi -q` on the host to see whether the driver is healthy") from exc


def _gather(environ, group_size, allow_mixed, exclude, expected_pairs, min_driver) -> dict:
    with Nvml(environ) as session:
        system = session.system()
        gpus = session.gpus()
        unknown = [item for item in exclude
                   if item not in {g["uuid"] for g in gpus} and normalise_bus_id(item) not in {g["bus_id"] for g in gpus}]
        if unknown:
            present = ", ".join(f"{g['bus_id']} {g['uuid']}" for g in gpus) or "none"
            raise GpuInventoryError(f"exclude names {', '.join(unknown)}, which is no GPU of this host; "
                                    f"GPUs present: {present}. Fix the UUID or bus id, or drop the entry.")
        links = {}
        link_list = []
        for first, second in itertools.combinations(sorted(gpus, key=lambda g: g["bus_id"]), 2):
            item = session.link(first, second)
            links[(first["bus_id"], second["bus_id"])] = item
            links[(second["bus_id"], first["bus_id"])] = item
            link_list.append(item)
        check_drivers(system, gpus, {**DEFAULT_MIN_DRIVER, **(min_driver or {})})
        groups, leftover = plan(gpus, links, group_size=group_size, allow_mixed=allow_mixed, exclude=exclude)
    ordinals = cuda_ordinals(gpus)
    pairs = [describe_group(n, group, links, ordinals) for n, group in enumerate(groups)]
    public = [{k: v for k, v in g.items() if not k.startswith("_") and k != "cc"} for g in gpus]
    result = {
        "source": session.source,
        **system,
        "gpus": public,
        "pairs": pairs,
        "leftover": leftover,
        "links": link_list,
        "group_size": group_size,
        "no_pairs_reason": no_pairs_reason(public, leftover, group_size) if not pairs else None,
        "warnings": [p["topology_warning"] for p in pairs if p["topology_warning"]],
    }
    if expected_pairs is not None and len(pairs) != expected_pairs:
        found = "; ".join(f"{g['bus_id']} {g['name']} {g['memory_total_mib']} MiB {g['uuid']}" for g in public)
        spare = "; ".join(f"{item['bus_id']}: {item['reason']}" for item in leftover)
        raise GpuInventoryError(
            f"expected_pairs is {expected_pairs} but this host now forms {len(pairs)} group(s) of {group_size} "
            f"({source_note(session.source)}GPUs found: {found or 'none'}"
            f"{'; not grouped: ' + spare if spare else ''}). The hardware changed since the inventory was "
            "written (a card swapped, removed or lost). Check the cards, then set expected_pairs to the new "
            "count so the replicas are planned for what is really there.", fact=result)
    return result


def summary(fact: dict) -> str:
    pairs = ", ".join(f"pair {p['index']}: {p['name']} x{len(p['uuids'])} ({p['link']}, fp4 {p['fp4_path']})"
                      for p in fact["pairs"]) or "no pairs"
    return f"{len(fact['gpus'])} GPU(s), {pairs}; {len(fact['leftover'])} left over [{fact['source']}]"
