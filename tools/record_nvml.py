# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Record what NVML answers on this host, for replay by plugins/module_utils/nvml_replay.py.

    python3 tools/record_nvml.py -o tests/fixtures/nvml/myhost.json      # on a GPU host, needs nvidia-ml-py
    python3 tools/record_nvml.py --convert raw.json -o converted.json    # an early raw recording
    python3 tools/record_nvml.py -o h.json --power-samples 60 --power-interval 0.5   # + a power series

Records every answer the inventory needs, per device and per ordered device pair, including errors
(as {"error": "NotSupported"}): a replay must refuse what the hardware refused. Only stdlib and
nvidia-ml-py are used so the file can be copied alone onto a GPU host. The format is documented in
docs/gpu-detection.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time

FORMAT = "pairserve-nvml-recording/1"
P2P_CAPS = ("READ", "WRITE", "NVLINK", "ATOMICS", "PROP")  # nvmlGpuP2PCapsIndex_t 0..4
NVLINK_MAX_LINKS = 36

# Device getters recorded as plain values: nvmlDeviceGet<Key>(handle).
SCALARS = ("Name", "UUID", "CudaComputeCapability", "Architecture", "Brand", "PowerUsage", "EnforcedPowerLimit",
           "PowerManagementLimit", "PowerManagementDefaultLimit", "PersistenceMode", "CurrPcieLinkGeneration",
           "CurrPcieLinkWidth", "MaxPcieLinkGeneration", "MaxPcieLinkWidth", "NumaNodeId", "MinorNumber", "Index")


def _error(exc) -> dict:
    """NVMLError_NotSupported -> {"error": "NotSupported", "code": 3}."""
    return {"error": type(exc).__name__.replace("NVMLError_", ""), "code": getattr(exc, "value", None)}


def _ask(pynvml, call, *args):
    try:
        value = call(*args)
    except pynvml.NVMLError as exc:
        return _error(exc)
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, tuple):
        value = list(value)
    return value


def record(pynvml) -> dict:
    """Everything the inventory reads, from the live driver."""
    pynvml.nvmlInit()
    try:
        system = {
            "DriverVersion": _ask(pynvml, pynvml.nvmlSystemGetDriverVersion),
            "NVMLVersion": _ask(pynvml, pynvml.nvmlSystemGetNVMLVersion),
            "CudaDriverVersion": _ask(pynvml, pynvml.nvmlSystemGetCudaDriverVersion),
            "CudaDriverVersion_v2": _ask(pynvml, pynvml.nvmlSystemGetCudaDriverVersion_v2),
        }
        devices, handles = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as exc:
                devices.append({"Handle": _error(exc), "HandleFails": True})
                handles.append(None)
                continue
            device = {key: _ask(pynvml, getattr(pynvml, "nvmlDeviceGet" + key), handle) for key in SCALARS}
            pci = _ask(pynvml, pynvml.nvmlDeviceGetPciInfo, handle)
            device["PciInfo"] = pci if isinstance(pci, dict) else {
                "busId": _text(pci.busId), "busIdLegacy": _text(pci.busIdLegacy), "domain": pci.domain,
                "bus": pci.bus, "device": pci.device, "pciDeviceId": pci.pciDeviceId,
                "pciSubSystemId": pci.pciSubSystemId}
            memory = _ask(pynvml, pynvml.nvmlDeviceGetMemoryInfo, handle)
            device["MemoryInfo"] = memory if isinstance(memory, dict) else {
                "total": memory.total, "free": memory.free, "used": memory.used}
            mig = _ask(pynvml, pynvml.nvmlDeviceGetMigMode, handle)
            # [current, pending] (1 = enabled), or the error (GeForce cards: NotSupported).
            device["MigMode"] = mig if isinstance(mig, dict) else [int(mig[0]), int(mig[1])]
            links = [_ask(pynvml, pynvml.nvmlDeviceGetNvLinkState, handle, link) for link in range(NVLINK_MAX_LINKS)]
            # One error for all links (GeForce: NotSupported) is stored once.
            device["NvLinkState"] = links[0] if all(item == links[0] for item in links) and isinstance(
                links[0], dict) else links
            devices.append(device)
            handles.append(handle)
        pairs = {}
        for i, first in enumerate(handles):
            for j, second in enumerate(handles):
                if i == j or first is None or second is None:
                    continue
                # Plain ints for the capability: nvidia-ml-py's NVML_P2P_CAPS_INDEX_READ is the tuple (0,).
                pairs[f"{i}-{j}"] = {
                    "TopologyCommonAncestor": _ask(pynvml, pynvml.nvmlDeviceGetTopologyCommonAncestor, first, second),
                    "P2PStatus": {name: _ask(pynvml, pynvml.nvmlDeviceGetP2PStatus, first, second, cap)
                                  for cap, name in enumerate(P2P_CAPS)},
                }
    finally:
        pynvml.nvmlShutdown()
    return {"system": system, "devices": devices, "pairs": pairs}


def record_power(pynvml, samples: int, interval: float, phase: str = "idle") -> tuple:
    """Power draw and energy counter of every device, `samples` times, `interval` seconds apart.

    Returns (per-device additions, the top-level "power_series" block). Samples are taken on a fixed
    schedule (start + k * interval), all devices in one sweep, so sample k of every GPU belongs to the same
    instant and a pair's draw is their sum. GPU utilisation is kept next to them as evidence of the phase
    (an idle window should read 0 %); the replay does not answer it.
    """
    pynvml.nvmlInit()
    try:
        handles = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handles.append(pynvml.nvmlDeviceGetHandleByIndex(index))
            except pynvml.NVMLError:
                handles.append(None)
        series = [{"PowerUsageSeries": [], "TotalEnergyConsumptionSeries": [], "UtilizationGpuSeries": []}
                  for dummy in handles]
        offsets = []
        start = time.monotonic()
        started_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for sample in range(samples):
            delay = start + sample * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            offsets.append(round(time.monotonic() - start, 4))
            for handle, entry in zip(handles, series):
                if handle is None:
                    continue
                entry["PowerUsageSeries"].append(_ask(pynvml, pynvml.nvmlDeviceGetPowerUsage, handle))
                entry["TotalEnergyConsumptionSeries"].append(
                    _ask(pynvml, pynvml.nvmlDeviceGetTotalEnergyConsumption, handle))
                rates = _ask(pynvml, pynvml.nvmlDeviceGetUtilizationRates, handle)
                entry["UtilizationGpuSeries"].append(rates if isinstance(rates, dict) else rates.gpu)
        for handle, entry in zip(handles, series):
            if handle is None:
                continue
            first = entry["TotalEnergyConsumptionSeries"][0] if samples else None
            # A counter the GPU does not have (NotSupported before Volta) is stored once, as a single answer.
            if isinstance(first, dict):
                entry["TotalEnergyConsumption"] = first
                del entry["TotalEnergyConsumptionSeries"]
            elif samples:
                entry["TotalEnergyConsumption"] = first
    finally:
        pynvml.nvmlShutdown()
    block = {"phase": phase, "samples": samples, "interval_s": interval, "mode": "cycle", "started_at": started_at,
             "t_s": offsets, "units": {"PowerUsageSeries": "mW", "TotalEnergyConsumptionSeries": "mJ",
                                       "UtilizationGpuSeries": "%"}}
    return series, block


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _raw_value(value):
    """The raw recorder's {"exc": "NVMLError_X", "code": n, "msg": ...} -> {"error": "X", "code": n}."""
    if isinstance(value, dict) and "exc" in value:
        return {"error": value["exc"].replace("NVMLError_", ""), "code": value.get("code")}
    return value


def convert(raw: dict) -> dict:
    """Convert the November 2026 raw probe (h200x2-recording.json) into FORMAT.

    Its device keys are already NVML getter names; the conversion renames "dev" to "devices", "nvlink" to
    "NvLinkState", "anc"/"p2p" to "TopologyCommonAncestor"/"P2PStatus", turns {"exc": ...} into
    {"error": ...}, and takes P2P READ from "READ_int0" (asked with the int 0) because "READ" holds the
    ctypes.ArgumentError that the binding's tuple constant caused, which no driver ever answered.
    """
    system = {key: raw[key] for key in ("DriverVersion", "NVMLVersion", "CudaDriverVersion", "CudaDriverVersion_v2")
              if key in raw}
    devices = []
    for dev in raw["dev"]:
        device = {key: _raw_value(dev[key]) for key in SCALARS + ("PciInfo", "MemoryInfo") if key in dev}
        device["NvLinkState"] = [_raw_value(item) for item in dev.get("nvlink", [])]
        devices.append(device)
    pairs = {}
    for key, entry in raw.get("pairs", {}).items():
        p2p = dict(entry["p2p"])
        p2p["READ"] = p2p.pop("READ_int0")
        pairs[key] = {"TopologyCommonAncestor": _raw_value(entry["anc"]),
                      "P2PStatus": {name: _raw_value(p2p[name]) for name in P2P_CAPS}}
    return {"system": system, "devices": devices, "pairs": pairs}


def write_atomic(path: str, data: dict) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".record-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=False)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="recording to write (JSON)")
    parser.add_argument("--convert", metavar="RAW", help="convert a raw recording instead of asking NVML")
    parser.add_argument("--note", default="", help="free text stored under provenance")
    parser.add_argument("--power-samples", type=int, default=0, metavar="N",
                        help="also sample power draw and the energy counter of every GPU N times (gpu_power replay)")
    parser.add_argument("--power-interval", type=float, default=1.0, metavar="S",
                        help="seconds between power samples (default 1.0)")
    parser.add_argument("--power-phase", default="idle", choices=("idle", "loaded"),
                        help="what the GPUs were doing while sampled, stored with the series")
    args = parser.parse_args(argv)
    if args.power_samples < 0 or args.power_interval <= 0:
        parser.error("--power-samples must be >= 0 and --power-interval > 0")
    if args.power_samples and args.convert:
        parser.error("--power-samples samples a live GPU; it cannot be combined with --convert")

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if args.convert:
        with open(args.convert, encoding="utf-8") as handle:
            body = convert(json.load(handle))
        provenance = (f"recorded on real hardware by an early raw probe ({os.path.basename(args.convert)}), "
                      f"converted by tools/record_nvml.py --convert on {now}. {args.note}").strip()
        meta = {"converted_from": os.path.basename(args.convert)}
    else:
        try:
            import pynvml  # pylint: disable=import-outside-toplevel
        except ImportError:
            print("record_nvml.py: nvidia-ml-py is not installed here (pip install nvidia-ml-py)", file=sys.stderr)
            return 2
        try:
            body = record(pynvml)
            if args.power_samples:
                additions, block = record_power(pynvml, args.power_samples, args.power_interval, args.power_phase)
                for device, extra in zip(body["devices"], additions):
                    device.update(extra)
                body["power_series"] = block
        except pynvml.NVMLError as exc:
            print(f"record_nvml.py: NVML failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        provenance = f"recorded on real hardware by tools/record_nvml.py on {now}. {args.note}".strip()
        meta = {"recorded_at": now, "host": platform.node(), "kernel": platform.release(),
                "python": platform.python_version(),
                "nvidia_ml_py": getattr(pynvml, "__version__", None) or _dist_version("nvidia-ml-py")}
    data = {"format": FORMAT, "provenance": provenance, "meta": meta, **body}
    write_atomic(args.output, data)
    print(f"wrote {args.output}: {len(data['devices'])} device(s), {len(data['pairs'])} ordered pair(s)"
          + (f", {args.power_samples} power samples every {args.power_interval} s ({args.power_phase})"
             if args.power_samples else ""))
    return 0


def _dist_version(name):
    try:
        from importlib.metadata import version  # pylint: disable=import-outside-toplevel
        return version(name)
    except Exception:  # pylint: disable=broad-except
        return None


if __name__ == "__main__":
    sys.exit(main())
