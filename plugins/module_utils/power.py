# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Power draw of a GPU node over a window, per GPU and per tensor-parallel pair (the gpu_power module).

The seed's point: the 4070 Ti SUPER pair idles at 102.8 W, the 5080 pair at 21.6 W; together 124.4 W
before host power, about 1.09 MWh a year left on. This module measures those figures from NVML instead
of quoting them: `sample()` reads nvmlDeviceGetPowerUsage and the total energy counter of every GPU on a
fixed schedule (the real driver, or a recording replayed by nvml_replay), `summarise()` turns the samples
into mean/min/max/p95 W per GPU and per pair, the annual energy at that draw, and with a bench report the
throughput per watt.
"""

from __future__ import annotations

import math
import time

try:
    import pynvml
except ImportError:  # nvml.Nvml reports it with the package to install
    pynvml = None

from ansible_collections.pairserve.llm.plugins.module_utils import nvml
from ansible_collections.pairserve.llm.plugins.module_utils._bench_measure import metric

HOURS_PER_YEAR = 8766  # 365.25 days: the seed's 124.4 W -> 1,090 kWh (1.09 MWh) a year
PHASES = ("idle", "loaded")
MAX_SAMPLES = 100000

# Bench report figures (plugins/modules/llm_bench.py: results.json `targets[].measurement`):
# (key in the result, path in a measurement, gets a per-watt figure). Single-stream decode is reported but
# not divided: one stream does not draw the power a loaded window measures.
BENCH_FIGURES = (
    ("decode_tok_s", ("single_stream", "decode_tok_s"), False),
    ("throughput_tok_s", ("concurrency", "throughput_tok_s"), True),
    ("ceiling_tok_s", ("sweep", "ceiling_tok_s"), True),
)


class PowerError(Exception):
    """A problem the user must act on; the message says what and how."""


# --- arithmetic ----------------------------------------------------------------------------------

def percentile(values: list, pct: float) -> float:
    """Nearest-rank percentile: the smallest sample with at least `pct` % of the samples at or below it."""
    if not values:
        raise ValueError("percentile of no samples")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def annual_kwh(mean_w: float) -> float:
    """Energy a year at a constant draw: W * 8766 h / 1000."""
    return mean_w * HOURS_PER_YEAR / 1000.0


def stats(samples_w: list) -> dict:
    """mean/min/max/p95 of a list of watts, and the annual energy at the mean."""
    if not samples_w:
        return {"samples": 0, "mean_w": None, "min_w": None, "max_w": None, "p95_w": None, "annual_kwh": None}
    mean = sum(samples_w) / len(samples_w)
    return {
        "samples": len(samples_w),
        "mean_w": round(mean, 2),
        "min_w": round(min(samples_w), 2),
        "max_w": round(max(samples_w), 2),
        "p95_w": round(percentile(samples_w, 95), 2),
        "annual_kwh": round(annual_kwh(mean), 1),
    }


def sample_count(window_seconds: float, interval_seconds: float) -> int:
    if window_seconds <= 0 or interval_seconds <= 0:
        raise PowerError(f"window_seconds ({window_seconds}) and interval_seconds ({interval_seconds}) must both "
                         "be greater than 0")
    if interval_seconds > window_seconds:
        raise PowerError(f"interval_seconds ({interval_seconds}) is longer than window_seconds ({window_seconds}): "
                         "that is not even two samples; shorten the interval or lengthen the window")
    count = int(round(window_seconds / interval_seconds))
    if count > MAX_SAMPLES:
        raise PowerError(f"window_seconds / interval_seconds gives {count} samples, more than {MAX_SAMPLES}: "
                         "sample less often")
    return count


# --- NVML ------------------------------------------------------------------------------------------

def _error_name(exc) -> str:
    return type(exc).__name__.replace("NVMLError_", "")


def _lost(exc) -> bool:
    return _error_name(exc) in ("GpuIsLost", "GpuRequiresReset", "ResetRequired")


def _read(call, handle):
    """(value, None) or (None, "NotSupported") for answers a GPU may lawfully refuse; a lost GPU raises."""
    try:
        return call(handle), None
    except pynvml.NVMLError as exc:
        if _lost(exc):
            raise
        return None, _error_name(exc)


def sample(environ=None, *, samples: int, interval_seconds: float, clock=time.monotonic, sleep=time.sleep) -> dict:
    """Read every GPU's power draw and energy counter `samples` times, `interval_seconds` apart.

    All GPUs are read in one sweep per tick (tick k at start + k * interval, never drifting), so the k-th
    samples of two GPUs belong together and a pair's draw is their sum. The energy counter is read on every
    tick too: a replayed recording answers its series in order, one answer per tick, as it was recorded.
    """
    with nvml.Nvml(environ) as session:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpu = {"index": index, "uuid": None, "bus_id": None}
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                gpu["uuid"] = pynvml.nvmlDeviceGetUUID(handle)
                gpu["bus_id"] = nvml.normalise_bus_id(pynvml.nvmlDeviceGetPciInfo(handle).busId)
                gpu["name"] = pynvml.nvmlDeviceGetName(handle)
                limit, dummy = _read(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            except pynvml.NVMLError as exc:
                raise PowerError(_lost_message(gpu, exc) if _lost(exc) else
                                 f"NVML refused to describe GPU {gpu['bus_id'] or index}: "
                                 f"NVMLError_{_error_name(exc)}") from exc
            gpu.update({"power_limit_w": round(limit / 1000.0, 1) if limit is not None else None,
                        "_handle": handle, "_power_mw": [], "_energy_mj": [], "_ticks": [], "_errors": set()})
            gpus.append(gpu)

        start = clock()
        for tick in range(samples):
            delay = start + tick * interval_seconds - clock()
            if delay > 0:
                sleep(delay)
            now = clock() - start
            for gpu in gpus:
                try:
                    power, power_error = _read(pynvml.nvmlDeviceGetPowerUsage, gpu["_handle"])
                    energy, energy_error = _read(pynvml.nvmlDeviceGetTotalEnergyConsumption, gpu["_handle"])
                except pynvml.NVMLError as exc:
                    raise PowerError(_lost_message(gpu, exc)) from exc
                gpu["_power_mw"].append(power)
                gpu["_energy_mj"].append((now, energy))
                refused = (("power", power_error), ("energy", energy_error))
                gpu["_errors"].update(f"{what}: {err}" for what, err in refused if err)
        elapsed = clock() - start
    return {"source": session.source, "samples": samples, "interval_s": interval_seconds,
            "elapsed_s": round(elapsed, 3), "gpus": gpus}


def _lost_message(gpu: dict, exc) -> str:
    where = gpu.get("bus_id") or f"NVML index {gpu['index']}"
    return (f"GPU {where} ({gpu.get('uuid') or 'UUID unreadable'}) answers NVML with {_error_name(exc)} while its "
            "power is sampled: it has fallen off the bus. Check `dmesg` for NVRM Xid lines and run the "
            "pairserve.llm.gpu_pairs module, which says how to recover; then measure again.")


# --- per GPU, per pair -----------------------------------------------------------------------------

def _energy(readings: list) -> dict:
    """Energy used between the first and the last tick, from the counter (mJ since the driver loaded)."""
    values = [(t, e) for t, e in readings if e is not None]
    if len(values) < 2 or len(values) != len(readings):
        return {"energy_j": None, "energy_mean_w": None}
    (first_t, first_e), (last_t, last_e) = values[0], values[-1]
    if last_e < first_e:  # the counter restarted (driver reload): no figure rather than a wrong one
        return {"energy_j": None, "energy_mean_w": None}
    joules = (last_e - first_e) / 1000.0
    span = last_t - first_t
    return {"energy_j": round(joules, 3), "energy_mean_w": round(joules / span, 2) if span > 0 else None}


def resolve_pairs(pairs: list, gpus: list) -> list:
    """Pairs as given (gpu_pairs' `pairserve_gpu.pairs` entries, or lists of UUIDs) -> the sampled GPUs."""
    by_uuid = {gpu["uuid"]: gpu for gpu in gpus}
    resolved = []
    for number, item in enumerate(pairs or []):
        if isinstance(item, dict):
            uuids, index, name = item.get("uuids"), item.get("index", number), item.get("name")
        else:
            uuids, index, name = item, number, None
        if isinstance(uuids, str):
            uuids = [part.strip() for part in uuids.split(",") if part.strip()]
        if not isinstance(uuids, list) or not uuids or not all(isinstance(u, str) for u in uuids):
            raise PowerError(f"pairs[{number}] is {item!r}: give a pair from pairserve_gpu.pairs (a dict with "
                             "`uuids`) or a list of GPU UUIDs")
        unknown = [u for u in uuids if u not in by_uuid]
        if unknown:
            present = ", ".join(f"{g['bus_id']} {g['uuid']}" for g in gpus) or "none"
            raise PowerError(f"pairs[{number}] names {', '.join(unknown)}, which is no GPU of this host (GPUs "
                             f"present: {present}). Pass this host's own pairserve_gpu.pairs, run gpu_pairs "
                             "again if a card was swapped.")
        members = [by_uuid[u] for u in uuids]
        resolved.append({"index": index, "name": name or " + ".join(sorted({g["name"] for g in members})),
                         "members": members})
    return resolved


def bench_targets_of(report: dict) -> dict:
    """{target name: measurement} from results.json, or from the registered llm_bench result."""
    if not isinstance(report, dict):
        raise PowerError("bench_report must be the bench JSON (results.json of the bench role) as a dict")
    targets = report.get("targets", report.get("results"))
    if not isinstance(targets, list):
        raise PowerError("bench_report has no `targets` (results.json) or `results` (llm_bench's return) list: "
                         "pass the results.json that the bench role wrote (its json_path)")
    return {t["name"]: t.get("measurement") or {} for t in targets if isinstance(t, dict) and "name" in t}


def bench_block(measurements: dict, target: str, mean_w, phase: str) -> dict:
    if target not in measurements:
        raise PowerError(f"bench_targets names {target!r}, which the bench report did not measure (it has: "
                         f"{', '.join(sorted(measurements)) or 'no targets'})")
    measurement = measurements[target]
    block = {"target": target,
             "concurrency": metric(measurement, ("concurrency", "concurrency"))}
    for key, path, dummy in BENCH_FIGURES:
        block[key] = metric(measurement, path)
    # Tokens per second per watt = tokens per joule. Only a loaded window measures the watts that produced
    # those tokens; dividing by idle draw would flatter every card, most of all the one that idles lowest.
    if phase == "loaded" and mean_w:
        block["per_watt"] = {key: round(block[key] / mean_w, 4) for key, dummy, divided in BENCH_FIGURES
                             if divided and block[key] is not None}
        block["power_basis_w"] = mean_w
    else:
        block["per_watt"] = None
        block["power_basis_w"] = None
    return block


def summarise(raw: dict, *, pairs=None, phase: str = "idle", bench_report=None, bench_targets=None,
              return_samples: bool = True) -> dict:
    """The module's `power` result from sample()'s readings."""
    gpus_out = []
    for gpu in raw["gpus"]:
        watts = [mw / 1000.0 for mw in gpu["_power_mw"] if mw is not None]
        entry = {"index": gpu["index"], "uuid": gpu["uuid"], "bus_id": gpu["bus_id"], "name": gpu["name"],
                 "power_limit_w": gpu["power_limit_w"], **stats(watts), **_energy(gpu["_energy_mj"]),
                 "unsupported": sorted(gpu["_errors"])}
        if return_samples:
            entry["samples_w"] = [round(w, 3) for w in watts]
        gpus_out.append(entry)

    measurements = bench_targets_of(bench_report) if bench_report else None
    targets = {str(k): v for k, v in (bench_targets or {}).items()}
    if targets and measurements is None:
        raise PowerError("bench_targets is set but bench_report is not: pass the bench role's results.json too")

    pairs_out = []
    for pair in resolve_pairs(pairs, raw["gpus"]):
        series = [m["_power_mw"] for m in pair["members"]]
        # Tick by tick: a pair draws the sum of its members at the same instant.
        summed = [sum(tick) / 1000.0 for tick in zip(*series) if all(v is not None for v in tick)]
        members = [next(g for g in gpus_out if g["uuid"] == m["uuid"]) for m in pair["members"]]
        energies = [m["energy_j"] for m in members]
        limits = [m["power_limit_w"] for m in members]
        entry = {"index": pair["index"], "name": pair["name"], "uuids": [m["uuid"] for m in pair["members"]],
                 "power_limit_w": round(sum(limits), 1) if all(v is not None for v in limits) else None,
                 **stats(summed),
                 "energy_j": round(sum(energies), 3) if all(v is not None for v in energies) else None}
        means = [m["energy_mean_w"] for m in members]
        entry["energy_mean_w"] = round(sum(means), 2) if all(v is not None for v in means) else None
        target = targets.get(str(pair["index"]))
        if target is not None:
            entry["bench"] = bench_block(measurements, target, entry["mean_w"], phase)
        if return_samples:
            entry["samples_w"] = [round(w, 3) for w in summed]
        pairs_out.append(entry)
    unmatched = sorted(set(targets) - {str(p["index"]) for p in pairs_out})
    if unmatched:
        raise PowerError(f"bench_targets has pair index(es) {', '.join(unmatched)}, but the pairs given are "
                         f"{', '.join(str(p['index']) for p in pairs_out) or 'none'}")

    means = [g["mean_w"] for g in gpus_out if g["mean_w"] is not None]
    total_mean = sum(means) if means and len(means) == len(gpus_out) else None
    return {
        "source": raw["source"],
        "phase": phase,
        "samples": raw["samples"],
        "interval_s": raw["interval_s"],
        "elapsed_s": raw["elapsed_s"],
        "hours_per_year": HOURS_PER_YEAR,
        "gpus": gpus_out,
        "pairs": pairs_out,
        "total": {"gpus": len(gpus_out), "mean_w": round(total_mean, 2) if total_mean is not None else None,
                  "annual_kwh": round(annual_kwh(total_mean), 1) if total_mean is not None else None},
    }


def gather(environ=None, *, window_seconds: float, interval_seconds: float, pairs=None, phase="idle",
           bench_report=None, bench_targets=None, return_samples=True, clock=time.monotonic,
           sleep=time.sleep) -> dict:
    """sample() + summarise(); every problem is a PowerError (or nvml.GpuInventoryError) with what to do."""
    if phase not in PHASES:
        raise PowerError(f"phase is {phase!r}: use one of {', '.join(PHASES)}")
    count = sample_count(window_seconds, interval_seconds)
    if bench_report is not None:
        bench_targets_of(bench_report)  # a malformed report fails before the window is spent
    try:
        raw = sample(environ, samples=count, interval_seconds=interval_seconds, clock=clock, sleep=sleep)
    except (PowerError, nvml.GpuInventoryError):
        raise
    except pynvml.NVMLError as exc:
        raise PowerError(f"NVML failed unexpectedly: NVMLError_{_error_name(exc)} ({exc}); run `nvidia-smi -q` "
                         "on the host to see whether the driver is healthy") from exc
    return summarise(raw, pairs=pairs, phase=phase, bench_report=bench_report, bench_targets=bench_targets,
                     return_samples=return_samples)


def summary(fact: dict) -> str:
    """One line: each pair's and the host's mean draw and annual energy."""
    parts = [f"pair {p['index']} ({p['name']}): {p['mean_w']} W mean, {p['annual_kwh']} kWh/year"
             for p in fact["pairs"]]
    total = fact["total"]
    parts.append(f"all {total['gpus']} GPU(s): {total['mean_w']} W, {total['annual_kwh']} kWh/year")
    return (f"{fact['phase']} window, {fact['samples']} samples every {fact['interval_s']} s: "
            + "; ".join(parts) + f" [{fact['source']}]")
