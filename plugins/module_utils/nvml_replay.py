# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A recorded NVIDIA host, replayed at the ctypes boundary under the real nvidia-ml-py.

`install(path)` makes the next `pynvml.nvmlInit()` "load" a stand-in for libnvidia-ml.so.1 whose C
functions are ctypes callbacks answering from a recording (see docs/gpu-detection.md for the format).
Everything above the C ABI is the real binding: library loading, argument conversion by libffi,
struct decoding, bytes to str, NVML_ERROR_* to NVMLError_* mapping. The exported function pointers
carry no argtypes, exactly like symbols of a real CDLL, so ABI mistakes fail as on hardware: passing
`NVML_P2P_CAPS_INDEX_READ`, which nvidia-ml-py defines as the tuple `(0,)`, raises ctypes.ArgumentError.

Used by the lab's GPU-less node containers and by the tests, and only when PAIRSERVE_NVML_REPLAY names a
recording; every fact gathered through it says `source: replay:<file>`.
"""

from __future__ import annotations

import ctypes
import json
from ctypes import CFUNCTYPE, POINTER, c_int, c_uint, c_ulonglong, c_void_p

try:
    import pynvml
except ImportError:  # reported by nvml.py, which names the package to install
    pynvml = None

FORMAT = "pairserve-nvml-recording/1"
ENV_VAR = "PAIRSERVE_NVML_REPLAY"

# Power series (recording keys `<Key>Series`): past the end a series cycles or holds its last value;
# a counter goes on adding its recorded increments.
SERIES_MODES = ("cycle", "hold")
COUNTER_SERIES = ("TotalEnergyConsumption",)

# nvmlDeviceGetP2PStatus's p2pIndex values (nvmlGpuP2PCapsIndex_t) and the names a recording uses.
P2P_CAPS = ("READ", "WRITE", "NVLINK", "ATOMICS", "PROP")


class RecordingError(ValueError):
    """The recording file is missing, unreadable or not in FORMAT."""


def error_codes() -> dict:
    """{"NotSupported": 3, "GpuIsLost": 15, ...} from the binding's own NVMLError_* classes."""
    # pylint: disable-next=protected-access
    return {cls.__name__[len("NVMLError_"):]: code for code, cls in pynvml.NVMLError._valClassMapping.items()}


def load(path: str) -> dict:
    """Read and check a recording; errors name the file and what to do."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise RecordingError(f"{ENV_VAR}={path}: cannot read the recording ({exc.strerror}); "
                             "point it at a JSON file written by tools/record_nvml.py") from exc
    except ValueError as exc:
        raise RecordingError(f"{ENV_VAR}={path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise RecordingError(f"{ENV_VAR}={path}: format is {found!r}, expected {FORMAT!r}; "
                             "convert raw recordings with tools/record_nvml.py --convert")
    if not isinstance(data.get("devices"), list) or not isinstance(data.get("system", {}), dict):
        raise RecordingError(f"{ENV_VAR}={path}: 'devices' must be a list and 'system' an object")
    return data


class ReplayLibrary:
    """Stands in for the object `CDLL("libnvidia-ml.so.1")` returns: attributes are C function pointers."""

    def __init__(self, recording: dict, path: str = "<memory>"):
        self.recording = recording
        self.path = path
        self.devices = recording["devices"]
        self.calls: list = []  # symbol names in call order, for tests
        self._codes = error_codes()
        self._initialized = 0
        # Stable non-NULL device handles: the addresses of small buffers, one per recorded device.
        self._handles = [ctypes.create_string_buffer(8) for dummy in self.devices]
        self._by_address = {ctypes.addressof(buf): i for i, buf in enumerate(self._handles)}
        self._keep: list = []  # callbacks and strings must outlive every call
        self._symbols: dict = {}
        self._cursors: dict = {}  # (device index, series key) -> answers given so far
        # Every error the recording answers with, named now: inside a call an unknown name could only become
        # NVML_ERROR_UNKNOWN (an exception cannot cross the C callback), hiding the typo.
        self._check_errors(recording)
        self._define()
        self._define_power()

    # CDLL stand-in --------------------------------------------------------------------------------
    def open(self, name, *_args, **_kwargs):
        """Replaces pynvml's CDLL: a recording of a host without a driver fails to load, as there."""
        if self._error_of(self.recording.get("library")) is not None:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        return self

    def __getattr__(self, name):
        try:
            return self.__dict__["_symbols"][name]
        except KeyError:
            raise AttributeError(name) from None  # the binding maps this to NVMLError_FunctionNotFound

    # plumbing ----------------------------------------------------------------------------------------
    def _error_of(self, value):
        """{"error": "NotSupported"} -> NVML_ERROR_NOT_SUPPORTED; anything else -> None."""
        if isinstance(value, dict) and "error" in value:
            name = value["error"]
            if name not in self._codes:
                raise RecordingError(f"{self.path}: unknown NVML error name {name!r}")
            return self._codes[name]
        return None

    def _check_errors(self, value):
        if isinstance(value, dict):
            self._error_of(value)
            for item in value.values():
                self._check_errors(item)
        elif isinstance(value, list):
            for item in value:
                self._check_errors(item)

    def _export(self, name, argtypes, impl, restype=c_int):
        def call(*args):
            self.calls.append(name)
            if name not in ("nvmlInitWithFlags", "nvmlErrorString") and not self._initialized:
                return pynvml.NVML_ERROR_UNINITIALIZED
            try:
                status = impl(*args)
            except (KeyError, IndexError, TypeError, ValueError):
                # A recording without this answer: say so the way a driver would, never "success".
                return pynvml.NVML_ERROR_UNKNOWN
            return pynvml.NVML_SUCCESS if status is None else status

        callback = CFUNCTYPE(restype, *argtypes)(call)
        # Cast to a pointer type without argtypes: real CDLL symbols have none, so libffi converts the
        # caller's arguments exactly as it would for libnvidia-ml.so.1.
        exported = ctypes.cast(callback, CFUNCTYPE(restype))
        self._keep.append(callback)
        self._symbols[name] = exported

    def _device(self, handle):
        return self.devices[self._by_address[handle]]

    def _answer(self, handle, key):
        device = self._device(handle)
        lost = self._error_of(device.get("Handle"))
        if lost is not None:
            return lost, None
        value = device[key]
        return self._error_of(value), value

    @staticmethod
    def _store(pointer, ctype, value):
        ctypes.cast(pointer, POINTER(ctype))[0] = value

    @staticmethod
    def _store_string(pointer, size, text):
        raw = text.encode()[: size - 1] + b"\0"
        ctypes.memmove(pointer, raw, len(raw))

    def _scalar(self, key, ctype=c_uint):
        def impl(handle, out):
            error, value = self._answer(handle, key)
            if error is not None:
                return error
            self._store(out, ctype, value)
            return None
        return impl

    def _string(self, key):
        def impl(handle, buf, size):
            error, value = self._answer(handle, key)
            if error is not None:
                return error
            if len(value.encode()) >= size:
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            self._store_string(buf, size, value)
            return None
        return impl

    def _pair(self, first, second, key):
        for handle in (first, second):
            lost = self._error_of(self._device(handle).get("Handle"))
            if lost is not None:
                return lost, None
        i, j = self._by_address[first], self._by_address[second]
        pairs = self.recording.get("pairs", {})
        entry = pairs.get(f"{i}-{j}", pairs.get(f"{j}-{i}"))
        value = entry[key]
        return self._error_of(value), value

    # the NVML surface the inventory and the recorder use ------------------------------------------------
    def _define(self):  # pylint: disable=too-many-locals,too-many-statements
        rec, export = self.recording, self._export
        system = rec.get("system", {})

        def init(_flags):
            error = self._error_of(rec.get("init"))
            if error is not None:
                return error  # e.g. {"error": "DriverNotLoaded"}
            self._initialized += 1
            return None
        export("nvmlInitWithFlags", [c_uint], init)

        def shutdown():
            self._initialized = max(0, self._initialized - 1)
        export("nvmlShutdown", [], shutdown)

        def error_string(code):
            # pylint: disable-next=protected-access
            text = pynvml.NVMLError._errcode_to_string.get(code, f"NVML error {code}")
            buf = ctypes.create_string_buffer(text.encode())
            self._keep.append(buf)
            return ctypes.addressof(buf)
        export("nvmlErrorString", [c_int], error_string, restype=c_void_p)

        def system_string(key):
            def impl(buf, size):
                value = system[key]
                error = self._error_of(value)
                if error is not None:
                    return error
                self._store_string(buf, size, value)
                return None
            return impl
        export("nvmlSystemGetDriverVersion", [c_void_p, c_uint], system_string("DriverVersion"))
        export("nvmlSystemGetNVMLVersion", [c_void_p, c_uint], system_string("NVMLVersion"))

        def system_int(key):
            def impl(out):
                value = system.get(key, system.get("CudaDriverVersion"))
                error = self._error_of(value)
                if error is not None:
                    return error
                self._store(out, c_int, value)
                return None
            return impl
        export("nvmlSystemGetCudaDriverVersion", [c_void_p], system_int("CudaDriverVersion"))
        export("nvmlSystemGetCudaDriverVersion_v2", [c_void_p], system_int("CudaDriverVersion_v2"))

        export("nvmlDeviceGetCount_v2", [c_void_p], lambda out: self._store(out, c_uint, len(self.devices)))

        def by_index(index, out):
            if index >= len(self.devices):
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            error = self._error_of(self.devices[index].get("Handle"))
            if error is not None and self.devices[index].get("HandleFails"):
                return error  # the driver refused even a handle (a GPU lost before NVML started)
            self._store(out, c_void_p, ctypes.addressof(self._handles[index]))
            return None
        export("nvmlDeviceGetHandleByIndex_v2", [c_uint, c_void_p], by_index)

        export("nvmlDeviceGetName", [c_void_p, c_void_p, c_uint], self._string("Name"))

        # A lost GPU still answers its UUID and PCI address from the driver's cache (nvidia-smi names it
        # by bus id), so these two ignore a recorded "Handle" error.
        def uuid(handle, buf, size):
            value = self._device(handle)["UUID"]
            error = self._error_of(value)
            if error is not None:
                return error
            self._store_string(buf, size, value)
            return None
        export("nvmlDeviceGetUUID", [c_void_p, c_void_p, c_uint], uuid)

        def pci_info(handle, out):
            value = self._device(handle)["PciInfo"]
            error = self._error_of(value)
            if error is not None:
                return error
            info = pynvml.nvmlPciInfo_t.from_address(out)
            domain, bus, devfn = value["busId"].split(":")
            info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(devfn.split(".")[0], 16)
            info.pciDeviceId = value.get("pciDeviceId", 0)
            info.pciSubSystemId = value.get("pciSubSystemId", 0)
            info.busId = value["busId"].encode()
            info.busIdLegacy = value.get("busIdLegacy", value["busId"][4:]).encode()
            return None
        export("nvmlDeviceGetPciInfo_v3", [c_void_p, c_void_p], pci_info)

        def memory(handle, out):
            error, value = self._answer(handle, "MemoryInfo")
            if error is not None:
                return error
            info = pynvml.c_nvmlMemory_t.from_address(out)
            info.total, info.free = value["total"], value["free"]
            info.used = value.get("used", value["total"] - value["free"])
            return None
        export("nvmlDeviceGetMemoryInfo", [c_void_p, c_void_p], memory)

        def compute_capability(handle, major, minor):
            error, value = self._answer(handle, "CudaComputeCapability")
            if error is not None:
                return error
            self._store(major, c_int, value[0])
            self._store(minor, c_int, value[1])
            return None
        export("nvmlDeviceGetCudaComputeCapability", [c_void_p, c_void_p, c_void_p], compute_capability)

        for key in ("PowerUsage", "EnforcedPowerLimit", "PowerManagementLimit", "PowerManagementDefaultLimit",
                    "PersistenceMode", "CurrPcieLinkGeneration", "CurrPcieLinkWidth", "MaxPcieLinkGeneration",
                    "MaxPcieLinkWidth", "Architecture", "Brand", "MinorNumber", "Index"):
            export("nvmlDeviceGet" + key, [c_void_p, c_void_p], self._scalar(key))
        export("nvmlDeviceGetNumaNodeId", [c_void_p, c_void_p], self._scalar("NumaNodeId", c_int))

        def mig_mode(handle, current, pending):
            # Recorded as [current, pending] (1 = enabled), or an error such as NotSupported (GeForce cards).
            error, value = self._answer(handle, "MigMode")
            if error is not None:
                return error
            self._store(current, c_uint, value[0])
            self._store(pending, c_uint, value[1])
            return None
        export("nvmlDeviceGetMigMode", [c_void_p, c_void_p, c_void_p], mig_mode)

        def cpu_affinity(handle, count, out):
            error, words = self._answer(handle, "CpuAffinity")
            if error is not None:
                return error
            array = ctypes.cast(out, POINTER(c_ulonglong))
            for i in range(count):
                array[i] = words[i] if i < len(words) else 0
            return None
        export("nvmlDeviceGetCpuAffinity", [c_void_p, c_uint, c_void_p], cpu_affinity)

        def nvlink_state(handle, link, out):
            error, links = self._answer(handle, "NvLinkState")
            if error is not None:
                return error  # one error for every link, e.g. NotSupported on GeForce cards
            if link >= len(links):
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            error = self._error_of(links[link])
            if error is not None:
                return error
            self._store(out, c_uint, links[link])
            return None
        export("nvmlDeviceGetNvLinkState", [c_void_p, c_uint, c_void_p], nvlink_state)

        def common_ancestor(first, second, out):
            error, value = self._pair(first, second, "TopologyCommonAncestor")
            if error is not None:
                return error
            self._store(out, c_int, value)
            return None
        export("nvmlDeviceGetTopologyCommonAncestor", [c_void_p, c_void_p, c_void_p], common_ancestor)

        def p2p_status(first, second, index, out):
            if index >= len(P2P_CAPS):
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            error, value = self._pair(first, second, "P2PStatus")
            if error is not None:
                return error
            status = value[P2P_CAPS[index]]
            error = self._error_of(status)
            if error is not None:
                return error
            self._store(out, c_uint, status)
            return None
        export("nvmlDeviceGetP2PStatus", [c_void_p, c_void_p, c_uint, c_void_p], p2p_status)

    # power series (gpu_power) -----------------------------------------------------------------------
    def _series_mode(self, device) -> str:
        mode = device.get("PowerSeriesMode", self.recording.get("power_series", {}).get("mode", "cycle"))
        if mode not in SERIES_MODES:
            raise RecordingError(f"{self.path}: power series mode {mode!r} is not one of {', '.join(SERIES_MODES)}")
        return mode

    def _next_in_series(self, handle, key):
        """The next recorded answer of `<key>Series`, or None when the device has no such series.

        A power series is answered in order; past its end it starts again ("cycle", the default) or keeps
        answering its last value ("hold"). An energy counter never runs backwards: past its end it goes on
        adding the recorded increments in the same order, as the counter of a GPU in that state would.
        """
        device = self._device(handle)
        series = device.get(key + "Series")
        if series is None:
            return None
        slot = (self._by_address[handle], key)
        turn = self._cursors.get(slot, 0)
        self._cursors[slot] = turn + 1
        if turn < len(series):
            return series[turn]
        if key in COUNTER_SERIES:
            steps = [b - a for a, b in zip(series, series[1:])] or [0]
            extra = turn - (len(series) - 1)
            whole, part = divmod(extra, len(steps))
            return series[-1] + whole * sum(steps) + sum(steps[:part])
        if self._series_mode(device) == "hold":
            return series[-1]
        return series[turn % len(series)]

    def _series_or_scalar(self, key, ctype):
        scalar = self._scalar(key, ctype)

        def impl(handle, out):
            lost = self._error_of(self._device(handle).get("Handle"))
            if lost is not None:
                return lost
            value = self._next_in_series(handle, key)
            if value is None:
                return scalar(handle, out)  # no series: the single recorded answer, as before
            error = self._error_of(value)
            if error is not None:
                return error
            self._store(out, ctype, value)
            return None
        return impl

    def _define_power(self):
        """Power draw and the energy counter, from `PowerUsageSeries` / `TotalEnergyConsumptionSeries` when a
        recording holds them (tools/record_nvml.py --power-samples), else from the single answers."""
        for number, device in enumerate(self.devices):
            for key in ("PowerUsage",) + COUNTER_SERIES:
                series = device.get(key + "Series")
                if series is not None and (not isinstance(series, list) or not series):
                    raise RecordingError(f"{self.path}: device {number}: {key}Series must be a non-empty list of "
                                         "answers (numbers or {\"error\": ...})")
            self._series_mode(device)
        self._export("nvmlDeviceGetPowerUsage", [c_void_p, c_void_p], self._series_or_scalar("PowerUsage", c_uint))
        self._export("nvmlDeviceGetTotalEnergyConsumption", [c_void_p, c_void_p],
                     self._series_or_scalar("TotalEnergyConsumption", c_ulonglong))

    def series_position(self, index: int, key: str = "PowerUsage") -> int:
        """How many answers of device `index`'s `<key>Series` were given (tests)."""
        return self._cursors.get((index, key), 0)


def install(path: str) -> ReplayLibrary:
    """Load the recording at `path` and make the binding use it from the next nvmlInit()."""
    if pynvml is None:
        raise RecordingError("nvidia-ml-py is not installed: the replay runs under the real binding")
    library = ReplayLibrary(load(path), path)
    # The binding resolves `CDLL` from its module globals (`from ctypes import *`) when it loads the
    # library, and caches symbols: reset both so no earlier (real or fake) library leaks through.
    pynvml.CDLL = library.open
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()  # pylint: disable=protected-access
    return library


def uninstall() -> None:
    """Give the binding back its real CDLL (tests that switch recordings in one process)."""
    pynvml.CDLL = ctypes.CDLL
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()  # pylint: disable=protected-access
